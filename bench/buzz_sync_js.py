#!/usr/bin/env python
"""buzz-sync-js (the TypeScript client, Node) against buzz-sync (Python): a full round of N
artifacts into SQLite, on the same relay in the same run, and the Node figure for applying a
1-change round to a 100k collection.

    .venv/bin/python bench/buzz_sync_js.py                 # N = 10,000
    .venv/bin/python bench/buzz_sync_js.py --n 10000 100000

The relay and its seeded database are bench/client.py's (N real signed artifacts, page limit
1000). Each client runs in a child process of its own, ids and signatures verified (and the
Node client again without verification). Needs PostgreSQL and Redis as bench/client.py does,
node, and buzz-sync-js built (bin/bootstrap test).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.client import Relay, full_round, prepare_database, seed  # noqa: E402
from nostr.schnorr import generate_secret, pubkey_from_secret  # noqa: E402

PACKAGE = ROOT / "buzz-sync-js"


def node_round(relay: Relay, reader: str, verify: bool,
               package: Path = PACKAGE, one_thread: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run(
            # BENCH_NODE_FLAGS: e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof" to profile the round.
            ["node", *os.environ.get("BENCH_NODE_FLAGS", "").split(), "bench/full_round.mjs",
             relay.url, reader, str(Path(tmp) / "c.sqlite"), "1" if verify else "0",
             "main" if one_thread else "default"],
            cwd=package, capture_output=True, text=True, check=False,
        )
        if run.returncode != 0:
            raise SystemExit(f"node round failed:\n{run.stderr}")
        result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
        return result


def browser_figures(relay: Relay, n: int, scripts: Path | None = None) -> dict[str, Any]:
    """The /app/ page in Debian's Chromium: its first sync of N tasks into IndexedDB (NIP-11,
    pages, signature checks, IndexedDB transactions, one render), then a reload's first paint
    of the N tasks from IndexedDB. `scripts`: serve the page's scripts (board.js and the chunks
    it imports) from this folder instead (the A/B: another checkout's committed page, on the
    same relay and data)."""
    from playwright.sync_api import Route, sync_playwright

    def other_script(route: Route) -> None:
        assert scripts is not None
        # The relay serves board.js under a content-hashed name (the manifest storage).
        name = route.request.url.rsplit("/", 1)[1].split("?")[0]
        found = scripts / re.sub(r"\.[0-9a-f]{12}\.js$", ".js", name)
        if not found.is_file():
            route.fulfill(status=404, body="")
            return
        route.fulfill(body=found.read_text(), content_type="text/javascript")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(bypass_csp=True)
            page = context.new_page()
            page.set_default_timeout(600_000)
            if scripts is not None:
                page.route("**/static/buzz-app/*.js*", other_script)
            # The renderer main thread's busy time (CDP's TaskDuration: script, style, layout,
            # IndexedDB callbacks): the fairer figure when other work shares the CPUs.
            cdp = context.new_cdp_session(page)
            cdp.send("Performance.enable")
            started = time.perf_counter()
            page.goto(f"{relay.url}/app/")
            page.wait_for_function(f"document.body.dataset.tasks === '{n}'")
            first_sync = time.perf_counter() - started
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            verifier = page.evaluate("document.body.dataset.verifier")
            paints = []
            for _ in range(3):
                page.reload()
                page.wait_for_function(f"document.body.dataset.tasks === '{n}'")
                # The page's marks, from navigation start: script running, storage open, the
                # newest screenful painted (first-paint, from a cursor over the modification
                # index), every row read from IndexedDB, every column rendered (rendered).
                marks = page.evaluate(
                    "Object.fromEntries(performance.getEntriesByType('mark')"
                    ".map(m => [m.name.split(':')[1], m.startTime / 1000]))")
                paints.append(marks)
            for marks in paints:  # a page without the first screenful's paint paints all at once
                marks.setdefault("before-rows", marks.get("first-paint", marks["opened"]))
                marks.setdefault("first-paint", marks["rendered"])
            paints.sort(key=lambda marks: marks["first-paint"])
        finally:
            browser.close()
    middle = paints[1]
    return {"first_sync_seconds": first_sync, "rate": n / first_sync, "verifier": verifier,
            "busy_seconds": metrics["TaskDuration"],
            "script_busy_seconds": metrics["ScriptDuration"],
            "paint_seconds": middle["first-paint"], "script_seconds": middle["start"],
            "complete_seconds": middle["rendered"],
            "read_seconds": middle["rows"] - middle["before-rows"],
            "render_seconds": middle["rendered"] - middle["rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--apply-n", type=int, default=100_000)
    parser.add_argument("--browser", action="store_true",
                        help="also time the /app/ page in Chromium (IndexedDB, first paint)")
    parser.add_argument("--base", type=Path, help="A/B: another checkout's buzz-sync-js (built), "
                        "e.g. a `git worktree` of the previous main, timed in the same run")
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs of Node rounds")
    parser.add_argument("--sqlite-pairs", type=int, default=3,
                        help="alternated pairs of buzz-sync's round then buzz-sync-js's (verified, "
                        "Node's default) on the same relay: the target's ratio as a median")
    parser.add_argument("--browser-pairs", type=int, default=1,
                        help="with --browser and --base: alternated pairs of the page's first "
                        "sync (base's page, then this checkout's, on the same relay and data)")
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--bench-database", default="buzz_sync_js_bench",
                        help="the database the bench creates and drops (beside --database-url's)")
    parser.add_argument("--redis-url", default=os.environ.get(
        "BENCH_REDIS_URL", "redis://127.0.0.1:6379/6"))
    args = parser.parse_args()

    author, reader = generate_secret(), generate_secret()
    rows = []
    browsers: list[tuple[int, dict[str, Any]]] = []
    bases: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    threads: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    sqlite_pairs: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for n in args.n:
        started = time.perf_counter()
        url = prepare_database(args.database_url, args.bench_database)
        seed(url, n, author, pubkey_from_secret(reader))
        print(f"N={n:,}: seeded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        os.environ["RELAY_APP"] = "1"  # the relay serves /app/ for --browser
        relay = Relay(url, args.redis_url)
        try:
            # Alternated, so that neither client always meets a warmer relay.
            python = full_round(relay, reader, verify=True)
            node = node_round(relay, reader, verify=True)
            python_again = full_round(relay, reader, verify=True)
            node_plain = node_round(relay, reader, verify=False)
            # Signatures checked on the round's thread, not in the worker thread beside the
            # SQLite writes (nodeVerifyWorker) that a Node client uses by default.
            node_one = node_round(relay, reader, verify=True, one_thread=True)
            # The target's ratio from alternated pairs (one pair moves by up to 2x on a shared
            # machine): buzz-sync, then buzz-sync-js.
            for _ in range(args.sqlite_pairs):
                sqlite_pairs.append((n, full_round(relay, reader, verify=True),
                                     node_round(relay, reader, verify=True)))
            if args.base:
                # Alternated pairs, the previous checkout first in each: rates per pair.
                for _ in range(args.pairs):
                    base = node_round(relay, reader, verify=True, package=args.base)
                    bases.append((n, base, node_round(relay, reader, verify=True)))
            # Node's verify thread on and off, alternated (the default is on only if it is faster).
            for _ in range(args.pairs):
                threads.append((n, node_round(relay, reader, verify=True, one_thread=True),
                                node_round(relay, reader, verify=True)))
            for _ in range(args.browser_pairs if args.browser else 0):
                if args.base:
                    scripts = args.base.parent / "buzzrelay" / "static" / "buzz-app"
                    browsers.append((n, browser_figures(relay, n, scripts) | {"label": "base"}))
                browsers.append((n, browser_figures(relay, n) | {"label": "this checkout"}))
        finally:
            relay.stop()
        for found in (python, node, python_again, node_plain, node_one):
            assert found["stored"] == n and found["kind"] == "full", found
        rows.append((n, python, python_again, node, node_plain, node_one))
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.bench_database}" WITH (FORCE)')

    print(f"\nFull round into SQLite, same relay, same run (page limit 1000, "
          f"{os.cpu_count()} CPUs shared); artifacts/s\n")
    print(f"{'N':>9} | {'buzz-sync':>9} | {'(again)':>8} | {'buzz-sync-js':>12} | "
          f"{'ratio':>5} | {'js 1 thread':>11} | {'ratio':>5} | {'js no-verify':>12} | "
          f"{'py CPU s':>8} | {'js CPU s':>8} | {'js peak RSS MiB':>15}")
    print("-" * 129)
    for n, python, python_again, node, plain, one in rows:
        py_rate = n / min(python["seconds"], python_again["seconds"])
        js_rate = n / node["seconds"]
        print(f"{n:>9,} | {n / python['seconds']:>9,.0f} | {n / python_again['seconds']:>8,.0f} | "
              f"{js_rate:>12,.0f} | {js_rate / py_rate:>5.2f} | {n / one['seconds']:>11,.0f} | "
              f"{n / one['seconds'] / py_rate:>5.2f} | {n / plain['seconds']:>12,.0f} | "
              f"{min(python['cpu_seconds'], python_again['cpu_seconds']):>8.1f} | "
              f"{node['cpu_seconds']:>8.1f} | {node['rss_peak_kib'] / 1024:>15.1f}")
    print("\nratio: buzz-sync-js over the better of buzz-sync's two rounds (target >= 1), its "
          "signatures checked in a worker thread (Node's default); js 1 thread: on the round's "
          "own thread; CPU: "
          "each client process's own CPU time in the round (the better of buzz-sync's two), the "
          "fairer figure on a shared machine.")

    for n in args.n:
        rounds = [(n / py["seconds"], n / js["seconds"], py["cpu_seconds"], js["cpu_seconds"])
                 for m, py, js in sqlite_pairs if m == n]
        if rounds:
            print(f"\nbuzz-sync -> buzz-sync-js, N={n:,}, {len(rounds)} alternated pairs "
                  "(artifacts/s, CPU s): "
                  + "; ".join(f"{p:,.0f} ({pc:.2f}) -> {j:,.0f} ({jc:.2f})"
                              for p, j, pc, jc in rounds)
                  + f"; median ratio {statistics.median(j / p for p, j, _, _ in rounds):.2f} "
                  f"(target >= 1), median CPU ratio "
                  f"{statistics.median(pc / jc for _, _, pc, jc in rounds):.2f} (buzz-sync's over "
                  "buzz-sync-js's)")
    for n in args.n if bases else []:
        pairs = [(n / b["seconds"], n / a["seconds"], b["cpu_seconds"], a["cpu_seconds"])
                 for m, b, a in bases if m == n]
        print(f"\nA/B, N={n:,}, verified, {len(pairs)} alternated pairs (artifacts/s, CPU s): "
              + "; ".join(f"{before:,.0f} ({bc:.1f}) -> {after:,.0f} ({ac:.1f})"
                          for before, after, bc, ac in pairs)
              + f"; median ratio {statistics.median(a / b for b, a, _, _ in pairs):.2f} "
              f"(this checkout over {args.base})")
    for n in args.n:
        rates = [(n / one["seconds"], n / two["seconds"]) for m, one, two in threads if m == n]
        print(f"\nNode verify thread, N={n:,}, {len(rates)} alternated pairs, artifacts/s "
              "one thread -> with the thread: "
              + "; ".join(f"{a:,.0f} -> {b:,.0f}" for a, b in rates)
              + f"; median ratio {statistics.median(b / a for a, b in rates):.2f}")
    for n, figures in browsers:
        print(f"\n/app/ in Chromium ({figures['label']}), N={n:,}: first sync into IndexedDB "
              f"{figures['rate']:,.0f} artifacts/s ({figures['first_sync_seconds']:.1f} s, "
              f"signatures checked with {figures['verifier'] or 'noble'}, main thread busy "
              f"{figures['busy_seconds']:.1f} s, script {figures['script_busy_seconds']:.1f} s; "
              f"target >= 5,000/s); "
              f"first paint after a reload {figures['paint_seconds'] * 1000:.0f} ms "
              f"(median of 3, target < 1 s; script running at "
              f"{figures['script_seconds'] * 1000:.0f} ms); the whole board (every row read, "
              f"{figures['read_seconds'] * 1000:.0f} ms, every column rendered, "
              f"{figures['render_seconds'] * 1000:.0f} ms) at "
              f"{figures['complete_seconds'] * 1000:.0f} ms")
    for n in args.n if args.base and args.browser_pairs > 1 else []:
        runs = [run for m, run in browsers if m == n]
        rates = list(zip([run["rate"] for run in runs if run["label"] == "base"],
                         [run["rate"] for run in runs if run["label"] != "base"], strict=True))
        print(f"\n/app/ first sync, N={n:,}, {len(rates)} alternated pairs, artifacts/s base -> "
              "this checkout: " + "; ".join(f"{a:,.0f} -> {b:,.0f}" for a, b in rates)
              + f"; medians {statistics.median(a for a, _ in rates):,.0f} -> "
              f"{statistics.median(b for _, b in rates):,.0f}, median ratio "
              f"{statistics.median(b / a for a, b in rates):.2f}")
    apply = subprocess.run(["node", "bench/apply_round.mjs", str(args.apply_n), "300"],
                           cwd=PACKAGE, capture_output=True, text=True, check=True)
    figures = json.loads(apply.stdout.strip().splitlines()[-1])
    print(f"\nApplying a 1-change round to a {args.apply_n:,}-artifact SQLite collection (Node): "
          f"p50 {figures['p50_ms']:.3f} ms, p95 {figures['p95_ms']:.3f} ms, max "
          f"{figures['max_ms']:.1f} ms over {figures['repeats']} rounds (target p50 <= 5 ms)")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()

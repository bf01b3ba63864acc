"""Which ASGI server serves the relay best on this machine: uvicorn, granian or daphne.

For each server and worker count, wrk drives two endpoints for a fixed time: `/healthz` (the
server and Django's request cycle, no database) and the NIP-11 document (one community lookup
plus the cached readiness verdict: the cheapest real relay answer). Prints requests per second
and latency percentiles, and writes bench/out/servers.png.

    .venv/bin/python bench/servers.py [--seconds 10] [--connections 32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import (
    BENCH_HOST,
    OUT,
    print_table,
    run_wrk,
    services,
    setup_database,
    start_server,
)

ENDPOINTS = {
    "healthz": ("/healthz", {}),
    "nip11": ("/info", {"Accept": "application/nostr+json"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--servers", default="uvicorn,granian,daphne")
    args = parser.parse_args()

    rows = []
    with services() as svc:
        setup_database(svc)
        for kind in args.servers.split(","):
            for workers in (1, 2) if kind != "daphne" else (1,):
                server = start_server(kind, svc, workers=workers)
                try:
                    for name, (path, headers) in ENDPOINTS.items():
                        run_wrk(  # warm-up: connections, readiness cache, community lookup
                            server.url + path, seconds=2, connections=args.connections,
                            headers={"Host": BENCH_HOST, **headers},
                        )
                        result = run_wrk(
                            server.url + path, seconds=args.seconds,
                            connections=args.connections,
                            headers={"Host": BENCH_HOST, **headers},
                        )
                        rows.append([kind, workers, name, f"{result.requests_per_second:.0f}",
                                     f"{result.p50_ms:.1f}", f"{result.p99_ms:.1f}",
                                     result.non_2xx + result.errors])
                finally:
                    server.stop()
    print_table(["server", "workers", "endpoint", "req/s", "p50 ms", "p99 ms", "failed"], rows)
    plot(rows)


def plot(rows: list[list[object]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    labels = [f"{r[0]} x{r[1]}\n{r[2]}" for r in rows]
    values = [float(str(r[3])) for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 4))
    ax.bar(labels, values, color=["#4c72b0" if r[2] == "nip11" else "#9db4d6" for r in rows])
    ax.set_ylabel("requests per second")
    ax.set_title("ASGI servers serving the relay (2 cores, wrk on the same machine)")
    plt.xticks(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "servers.png", dpi=120)
    print(f"plot: {OUT / 'servers.png'}")


if __name__ == "__main__":
    main()

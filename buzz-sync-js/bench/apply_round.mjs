// Applying a 1-change continuation round to a 100k-artifact collection in SQLite (Node): the
// page's transaction (version check, head lookup, upsert, token) as BuzzClient runs it, p50
// and p95 over the repeats. No relay: the page is made here (ids are random, not signed; the
// store does not verify). Run: node bench/apply_round.mjs [N] [repeats]
import { randomBytes, randomUUID } from "node:crypto";

import { parsePage } from "../dist/index.js";
import { SqliteStore } from "../dist/sqlite.js";

const N = Number(process.argv[2] ?? 100_000);
const REPEATS = Number(process.argv[3] ?? 300);
const hex = (n) => randomBytes(n).toString("hex");
const channel = randomUUID();
const author = hex(32);
const event = (d, i, prev) => ({
  id: hex(32), pubkey: author, created_at: 1_700_000_000 + i, kind: 45010, sig: hex(64), content: '{"done":false}',
  tags: [["ar", "1"], ["d", d], ["h", channel], ["type", "buzz.task"], ["op", prev ? "update" : "create"], ["title", `task ${i}`], ...(prev ? [["prev", prev]] : [])],
});

// A file (WAL, synchronous=NORMAL), as an app keeps it.
const path = `/tmp/buzz-sync-js-bench-${process.pid}.sqlite`;
const store = new SqliteStore(path);
const key = "bench";
await store.open(key);
let state = await store.state(key);
const ds = [];
const loadStarted = performance.now();
for (let start = 0; start < N; start += 1000) {
  const events = [];
  for (let i = start; i < Math.min(N, start + 1000); i += 1) {
    const d = randomUUID();
    ds.push(d);
    events.push(event(d, i));
  }
  const more = start + 1000 < N;
  const page = parsePage({ events, removed: [], progress: `p${start}`, more, reset: start === 0 }, false);
  const applied = await store.applyPage(key, { expectedVersion: state.version, target: start === 0 ? 1 : state.targetSlot ?? 1, clearTarget: start === 0, page, continuable: true, swap: !more });
  state = applied.state;
}
const loadSeconds = (performance.now() - loadStarted) / 1000;
const times = [];
for (let r = 0; r < REPEATS; r += 1) {
  const d = ds[Math.floor(Math.random() * ds.length)];
  const current = await store.get(key, d);
  const body = { events: [event(d, N + r, current.eventId)], removed: [], progress: `c${r}`, more: false, reset: false };
  const started = performance.now();
  const page = parsePage(body, false);
  const applied = await store.applyPage(key, { expectedVersion: state.version, target: state.liveSlot, clearTarget: false, page, continuable: true, swap: false });
  times.push(performance.now() - started);
  state = applied.state;
  if (applied.changes.updated !== 1) throw new Error("the change was not applied");
}
times.sort((a, b) => a - b);
const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
console.log(JSON.stringify({ n: N, load_seconds: +loadSeconds.toFixed(2), load_rate: Math.round(N / loadSeconds), p50_ms: +at(0.5).toFixed(3), p95_ms: +at(0.95).toFixed(3), max_ms: +times.at(-1).toFixed(3), repeats: REPEATS }));
await store.close();
for (const suffix of ["", "-wal", "-shm"]) await import("node:fs").then((fs) => fs.rmSync(path + suffix, { force: true }));

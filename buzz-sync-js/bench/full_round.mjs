// One full round into SQLite with this package, for bench/buzz_sync_js.py (beside buzz-sync's
// round on the same relay): node bench/full_round.mjs <relay url> <secret hex> <db> <verify 1|0>
// [default|main]; main: signatures checked on the round's own thread, not in the worker thread
// (nodeVerifyWorker) that a Node client uses by default
import { BuzzClient } from "../dist/index.js";
import { SqliteStore } from "../dist/sqlite.js";

const [relay, secret, db, verify, where] = process.argv.slice(2);
const store = new SqliteStore(db);
const verifyWorker = where === "main" ? false : undefined;
const client = await BuzzClient.open({ relay, store, secretKey: secret, useNip07: false, live: false, verify: verify === "1", verifyWorker });
const started = performance.now();
const cpu = process.cpuUsage();
const [summary] = await client.syncNow();
const seconds = (performance.now() - started) / 1000;
const used = process.cpuUsage(cpu);
console.log(JSON.stringify({
  seconds, cpu_seconds: (used.user + used.system) / 1e6, items: summary.items, pages: summary.pages, kind: summary.kind,
  stored: await store.count(client.key), rss_peak_kib: Math.round(process.resourceUsage().maxRSS),
}));
await client.close();
await store.close();

// The parts that need no relay: the three storage adapters agree page by page (IndexedDB
// through fake-indexeddb), pages are checked before anything is applied, retries follow the
// policy (503 backoff, give up), and an unreachable relay sends writes to the outbox.
import assert from "node:assert/strict";
import { test } from "node:test";
import { execFileSync } from "node:child_process";
import { Worker as NodeWorker } from "node:worker_threads";
import { IDBFactory, IDBKeyRange } from "fake-indexeddb";

import { BuzzClient, IndexedDbStore, MemoryStore, Publisher, RelayAddress, RelayHttp, Syncer, keySigner, generateSecretHex, parsePage, rowOf } from "../dist/index.js";
import { random } from "./seeded.mjs";
import { SqliteStore } from "../dist/sqlite.js";
import { nodeVerifyWorker } from "../dist/node-verify.js";
import { emptyState } from "../dist/store.js";
import { requestedEvents } from "../dist/verify-pool.js";
import { finalizeEvent } from "nostr-tools/pure";
import { hexToBytes } from "nostr-tools/utils";

const SECRET = generateSecretHex();
const CHANNELS = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"];
const uuidOf = (n) => `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`;

function head(d, channel, title, prev) {
  const tags = [["ar", "1"], ["d", d], ["h", channel], ["type", "buzz.task"], ["op", prev ? "update" : "create"], ["title", title]];
  if (prev) tags.push(["prev", prev]);
  return finalizeEvent({ kind: 45010, created_at: Math.floor(Date.now() / 1000), tags, content: title }, hexToBytes(SECRET));
}


/** A relay in a function: pages a schedule of random changes, with resets and removed channels. */
function scriptedRelay(seed) {
  const rand = random(seed);
  const world = new Map(); // d -> event
  const pages = [];
  let n = 0;
  for (let round = 0; round < 12; round += 1) {
    const reset = round === 0 || rand() < 0.15;
    const events = [];
    const removed = [];
    const removedChannels = !reset && rand() < 0.2 ? [CHANNELS[Math.floor(rand() * 3)]] : [];
    for (const channel of removedChannels) for (const [d, e] of world) if (e.tags[2][1] === channel) world.delete(d);
    for (let i = 0; i < 1 + Math.floor(rand() * 6); i += 1) {
      const r = rand();
      const existing = [...world.keys()];
      if (r < 0.5 || !existing.length) {
        const d = uuidOf(++n);
        world.set(d, head(d, CHANNELS[Math.floor(rand() * 3)], `t${n}`));
      } else if (r < 0.8) {
        const d = existing[Math.floor(rand() * existing.length)];
        world.set(d, head(d, CHANNELS[Math.floor(rand() * 3)], `u${n++}`, world.get(d).id));
      } else {
        const d = existing[Math.floor(rand() * existing.length)];
        world.delete(d);
        if (!reset) removed.push({ d, reason: "deleted" });
      }
    }
    const touched = reset ? [...world.values()] : [];
    const named = new Set(removed.map((r) => r.d));
    if (!reset) for (const [d, e] of world) if (!named.has(d) && rand() < 0.5) touched.push(e);
    // Everything changed this round must travel: re-send every head (duplicates are allowed).
    if (!reset) for (const [d, e] of world) if (!named.has(d) && !touched.includes(e)) touched.push(e);
    const chunks = [];
    for (let i = 0; i < touched.length; i += 3) chunks.push(touched.slice(i, i + 3));
    if (!chunks.length) chunks.push([]);
    chunks.forEach((chunk, i) => {
      pages.push({
        events: chunk, removed: i === 0 ? removed : [], progress: `p${pages.length}`, more: i < chunks.length - 1,
        reset: reset && i === 0, ...(i === 0 && removedChannels.length ? { removed_channels: removedChannels } : {}),
      });
    });
    pages.push({ expect: new Map([...world].map(([d, e]) => [d, e.id])) });
  }
  return pages;
}

async function applyAll(store, pages) {
  const key = "k";
  await store.open(key);
  const snapshots = [];
  for (const body of pages) {
    if (body.expect) {
      const rows = await store.query(key, {});
      snapshots.push(new Map(rows.map((r) => [r.d, r.eventId])));
      assert.deepEqual(snapshots.at(-1), body.expect);
      continue;
    }
    const page = parsePage(body, false);
    const state = await store.state(key);
    const startsFull = state.progress === null || page.reset;
    const target = startsFull ? 1 - state.liveSlot : state.roundOpen && state.targetSlot !== null ? state.targetSlot : state.liveSlot;
    await store.applyPage(key, { expectedVersion: state.version, target, clearTarget: startsFull, page, continuable: true, swap: !page.more && target !== state.liveSlot });
  }
  return snapshots;
}

test("memory, SQLite and IndexedDB apply a seeded schedule of pages to the same collections", async () => {
  for (const seed of [1, 2, 3]) {
    const pages = scriptedRelay(seed);
    const memory = await applyAll(new MemoryStore(), pages);
    const sqlite = await applyAll(new SqliteStore(":memory:"), pages);
    const idb = await applyAll(await IndexedDbStore.open(`seed-${seed}`, new IDBFactory(), IDBKeyRange), pages);
    assert.deepEqual(sqlite, memory);
    assert.deepEqual(idb, memory);
  }
});

for (const [name, make] of [
  ["memory", async () => new MemoryStore()],
  ["sqlite", async () => new SqliteStore(":memory:")],
  ["indexeddb", async () => IndexedDbStore.open("t", new IDBFactory(), IDBKeyRange)],
]) {
  test(`${name}: removed_channels delete by each item's stored home; a marker only over its prev`, async () => {
    const store = await make();
    await store.open("k");
    const [a, b, c] = [uuidOf(1), uuidOf(2), uuidOf(3)];
    const ea = head(a, CHANNELS[0], "a"), eb = head(b, CHANNELS[0], "b"), ec = head(c, CHANNELS[1], "c");
    const first = parsePage({ events: [ea, eb, ec], removed: [], progress: "1", more: false, reset: true }, true);
    await store.applyPage("k", { expectedVersion: 0, target: 1, clearTarget: true, page: first, continuable: true, swap: true });
    // b moved to channel 1 (not yet delivered), then channel 0 left the view: b goes too, by
    // its stored home, and the page that re-delivers it brings it back.
    const gone = parsePage({ events: [], removed: [], removed_channels: [CHANNELS[0]], progress: "2", more: true, reset: false }, true);
    const applied = await store.applyPage("k", { expectedVersion: 1, target: 1, clearTarget: false, page: gone, continuable: true, swap: false });
    assert.equal(applied.changes.removed, 2);
    assert.deepEqual((await store.query("k", {})).map((r) => r.d), [c]);
    const marker = finalizeEvent({ kind: 45011, created_at: 1, tags: [["ar", "1"], ["d", c], ["h", CHANNELS[1]], ["reason", "moved"], ["prev", "00".repeat(32)]], content: "" }, hexToBytes(SECRET));
    const stale = parsePage({ events: [marker], removed: [], progress: "3", more: false, reset: false }, true);
    await store.applyPage("k", { expectedVersion: 2, target: 1, clearTarget: false, page: stale, continuable: true, swap: false });
    assert.equal((await store.get("k", c)).eventId, ec.id, "a marker naming another head leaves ours");
    // A page applied over a version another writer moved past: nothing applied.
    await assert.rejects(
      store.applyPage("k", { expectedVersion: 0, target: 1, clearTarget: false, page: first, continuable: true, swap: false }),
      (error) => error.code === "concurrent_sync",
    );
    assert.equal((await store.state("k")).version, 3);
  });
}

function stamped(d, channel, title, createdAt) {
  const tags = [["ar", "1"], ["d", d], ["h", channel], ["type", createdAt % 3 ? "buzz.task" : "buzz.note"], ["op", "create"], ["title", title]];
  return finalizeEvent({ kind: 45010, created_at: createdAt, tags, content: `{"n":${createdAt}}` }, hexToBytes(SECRET));
}

test("every adapter answers limited 'newest first' queries as the full ordering does (ties by d)", async () => {
  const rand = random(7);
  // Many rows modified in the same second: a limit that cuts through a tie must still take the
  // smallest d's of that second, as compareRows orders them.
  const events = Array.from({ length: 120 }, (_, i) => stamped(uuidOf((i * 7919) % 1000), CHANNELS[i % 3], `Task ${i}`, 1_700_000_000 + Math.floor(rand() * 15)));
  const page = parsePage({ events, removed: [], progress: "p", more: false, reset: true }, true);
  const stores = [new MemoryStore(), new SqliteStore(":memory:"), await IndexedDbStore.open("limits", new IDBFactory(), IDBKeyRange)];
  for (const store of stores) {
    await store.open("k");
    await store.applyPage("k", { expectedVersion: 0, target: 1, clearTarget: true, page, continuable: true, swap: true });
  }
  const queries = [{}, { type: "buzz.task" }, { channel: CHANNELS[1] }, { channel: [CHANNELS[0], CHANNELS[2]], type: "buzz.note" }, { titleContains: "task 1" }];
  for (const query of queries) {
    const all = (await stores[0].query("k", query)).map((r) => r.d);
    for (const limit of [0, 1, 7, 8, 9, 40, 500]) {
      for (const store of stores) {
        const found = await store.query("k", { ...query, orderBy: "modified", limit });
        assert.deepEqual(found.map((r) => r.d), all.slice(0, limit), `${store.constructor.name} ${JSON.stringify(query)} limit ${limit}`);
      }
    }
  }
  // A row read back carries its whole event, as stored (IndexedDB keeps it as text, parsed on use).
  const d = events[5].tags[1][1];
  for (const store of stores) {
    const row = await store.get("k", d);
    const plain = (event) => JSON.parse(JSON.stringify(event)); // without nostr-tools' verified mark
    assert.deepEqual(plain(row.event), plain(events.find((e) => e.tags[1][1] === d)));
    assert.equal(row.title, "Task 5");
  }
});

test("IndexedDB: a database of version 1 (whole events in rows) opens, reads and syncs on", async () => {
  const factory = new IDBFactory();
  const e = head(uuidOf(77), CHANNELS[0], "from version 1");
  await new Promise((resolve, reject) => {
    const req = factory.open("old", 1);
    req.onupgradeneeded = () => {
      const db = req.result;
      db.createObjectStore("collections", { keyPath: "key" });
      db.createObjectStore("artifacts", { keyPath: ["key", "slot", "d"] }).createIndex("channel", ["key", "slot", "channel"]);
      db.createObjectStore("outbox", { keyPath: "id", autoIncrement: true }).createIndex("key", "key");
      db.createObjectStore("meta", { keyPath: "name" });
    };
    req.onsuccess = () => {
      const db = req.result;
      const tx = db.transaction(["collections", "artifacts"], "readwrite");
      tx.objectStore("collections").put({ key: "k", state: { version: 1, liveSlot: 1, progress: "1", roundOpen: false, targetSlot: null, continuable: true, complete: true, rounds: 1 } });
      tx.objectStore("artifacts").put({ key: "k", slot: 1, d: uuidOf(77), eventId: e.id, channel: CHANNELS[0], createdAt: e.created_at, event: e });
      tx.oncomplete = () => (db.close(), resolve());
      tx.onerror = () => reject(tx.error);
    };
    req.onerror = () => reject(req.error);
  });
  const store = await IndexedDbStore.open("old", factory, IDBKeyRange);
  assert.equal((await store.get("k", uuidOf(77))).title, "from version 1");
  assert.deepEqual((await store.query("k", { orderBy: "modified", limit: 5 })).map((r) => r.eventId), [e.id]);
  const next = head(uuidOf(78), CHANNELS[1], "after the upgrade");
  await store.applyPage("k", { expectedVersion: 1, target: 1, clearTarget: false, page: parsePage({ events: [next], removed: [], progress: "2", more: false, reset: false }, true), continuable: true, swap: false });
  assert.deepEqual((await store.query("k", {})).map((r) => r.title).sort(), ["after the upgrade", "from version 1"]);
});

/** A database as version 2 of the adapter left it: `schema` creates its stores, `fill` writes. */
function oldDatabase(factory, name, version, fill) {
  return new Promise((resolve, reject) => {
    const req = factory.open(name, version);
    req.onupgradeneeded = () => {
      const db = req.result;
      db.createObjectStore("collections", { keyPath: "key" });
      const artifacts = db.createObjectStore("artifacts", { keyPath: ["key", "slot", "d"] });
      artifacts.createIndex("channel", ["key", "slot", "channel"]);
      if (version >= 2) artifacts.createIndex("modified", ["key", "slot", "createdAt"]);
      db.createObjectStore("outbox", { keyPath: "id", autoIncrement: true }).createIndex("key", "key");
      db.createObjectStore("meta", { keyPath: "name" });
    };
    req.onsuccess = () => {
      const db = req.result;
      const tx = db.transaction(["collections", "artifacts", "outbox", "meta"], "readwrite");
      fill(tx);
      tx.oncomplete = () => (db.close(), resolve());
      tx.onerror = () => reject(tx.error);
    };
    req.onerror = () => reject(req.error);
  });
}

/** A row as version 2 wrote it (flat, the event as JSON text). */
const rowV2 = (key, slot, e) => {
  const tag = (name) => e.tags.find((t) => t[0] === name)?.[1] ?? null;
  return {
    key, slot, d: tag("d"), eventId: e.id, channel: tag("h"), createdAt: e.created_at, kind: e.kind, type: tag("type"), op: tag("op"),
    title: tag("title"), content: e.content, author: e.pubkey, event: JSON.stringify(e),
  };
};

test("IndexedDB: a version 2 database moves to version 3 whole: states, both slots, a staged round, outbox and meta", async () => {
  const factory = new IDBFactory();
  const [a, b, c, e] = [1, 2, 3, 5].map((n) => stamped(uuidOf(n), CHANNELS[n % 3], `Task ${n}`, 1_700_000_000 + n));
  // k1: live slot 1 (a, and b as a version 1 row: the whole event), a full round staged in
  // slot 0 (c so far); k2: its own collection in slot 0 (e).
  const k1 = { version: 3, liveSlot: 1, progress: "p3", roundOpen: true, targetSlot: 0, continuable: true, complete: true, rounds: 1 };
  const k2 = { version: 1, liveSlot: 0, progress: "q1", roundOpen: false, targetSlot: null, continuable: true, complete: true, rounds: 1 };
  await oldDatabase(factory, "v2", 2, (tx) => {
    tx.objectStore("collections").put({ key: "k1", state: k1 });
    tx.objectStore("collections").put({ key: "k2", state: k2 });
    const artifacts = tx.objectStore("artifacts");
    artifacts.put(rowV2("k1", 1, a));
    artifacts.put({ key: "k1", slot: 1, d: uuidOf(2), eventId: b.id, channel: CHANNELS[2], createdAt: b.created_at, event: b });
    artifacts.put(rowV2("k1", 0, c));
    artifacts.put(rowV2("k2", 0, e));
    tx.objectStore("outbox").add({ key: "k1", event: a, queuedAt: 7 });
    tx.objectStore("meta").put({ name: "channel-names", value: "{}" });
  });
  const store = await IndexedDbStore.open("v2", factory, IDBKeyRange);
  assert.deepEqual(await store.state("k1"), k1);
  assert.deepEqual(await store.state("k2"), k2);
  const plain = (event) => JSON.parse(JSON.stringify(event));
  const d = (rows) => rows.map((r) => r.d);
  assert.deepEqual(d(await store.query("k1", {})), [uuidOf(2), uuidOf(1)], "newest first");
  assert.deepEqual(d(await store.query("k1", { orderBy: "modified", limit: 1 })), [uuidOf(2)]);
  assert.deepEqual(d(await store.query("k1", { channel: CHANNELS[1] })), [uuidOf(1)]);
  assert.deepEqual(d(await store.query("k1", { type: "buzz.note" })), [uuidOf(1)]); // stamped: a created_at divisible by 3
  assert.deepEqual(d(await store.query("k1", { titleContains: "task 2", orderBy: "title" })), [uuidOf(2)]);
  assert.deepEqual(plain((await store.get("k1", uuidOf(1))).event), plain(a));
  assert.deepEqual(plain((await store.get("k1", uuidOf(2))).event), plain(b));
  assert.equal(await store.count("k1"), 2);
  assert.deepEqual(d(await store.query("k2", {})), [uuidOf(5)]);
  assert.deepEqual((await store.outboxList("k1")).map((o) => [o.event.id, o.queuedAt]), [[a.id, 7]]);
  assert.equal(await store.getMeta("channel-names"), "{}");
  // The staged round goes on in slot 0 and its last page makes it live.
  const f = stamped(uuidOf(6), CHANNELS[0], "Task 6", 1_700_000_006);
  const last = parsePage({ events: [f], removed: [], progress: "p4", more: false, reset: false }, true);
  const applied = await store.applyPage("k1", { expectedVersion: 3, target: 0, clearTarget: false, page: last, continuable: true, swap: true });
  assert.deepEqual([applied.changes.added, applied.changes.removed], [2, 2]);
  assert.deepEqual(d(await store.query("k1", {})), [uuidOf(6), uuidOf(3)]);
  assert.deepEqual(d(await store.query("k2", {})), [uuidOf(5)], "the other collection is untouched");
  // A collection first written now gets a number of its own.
  const g = stamped(uuidOf(7), CHANNELS[1], "Task 7", 1_700_000_007);
  await store.open("k3");
  await store.applyPage("k3", { expectedVersion: 0, target: 1, clearTarget: true, page: parsePage({ events: [g], removed: [], progress: "r1", more: false, reset: true }, true), continuable: true, swap: true });
  assert.deepEqual(d(await store.query("k3", {})), [uuidOf(7)]);
  assert.deepEqual(d(await store.query("k2", {})), [uuidOf(5)]);
  await store.close();
  const names = await new Promise((resolve, reject) => {
    const req = factory.open("v2");
    req.onsuccess = () => {
      const found = [req.result.version, [...req.result.objectStoreNames].sort()];
      req.result.close();
      resolve(found);
    };
    req.onerror = () => reject(req.error);
  });
  assert.deepEqual(names, [3, ["collections", "meta", "outbox", "rows"]], "the old rows' store is gone");
});

test("a page is checked whole first: forged events, a d named twice, reset with removed_channels", () => {
  const e = head(uuidOf(9), CHANNELS[0], "x");
  assert.throws(() => parsePage({ events: [{ ...e, content: "forged" }], removed: [], progress: "p", more: false, reset: false }), (x) => x.code === "protocol");
  assert.throws(() => parsePage({ events: [e], removed: [{ d: uuidOf(9), reason: "deleted" }], progress: "p", more: false, reset: false }), /twice/);
  assert.throws(() => parsePage({ events: [], removed: [], removed_channels: [CHANNELS[0]], progress: "p", more: false, reset: true }), /both/);
  assert.throws(() => parsePage({ events: [], removed: [], removed_channels: ["nope"], progress: "p", more: false, reset: false }), /removed_channels/);
  assert.throws(() => parsePage({ events: [], removed: [], more: false, reset: false }), /progress/);
});

const INFO = { supported_extensions: ["artifacts.incremental"], artifacts: { incremental: { endpoint: "/query", max_limit: 1000, view_changes: ["reset", "incremental"] } } };
const json = (status, body, headers = {}) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });

test("503 backs off exponentially with jitter up to the cap, then gives up as busy", async () => {
  const waits = [];
  let calls = 0;
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    retry: { base: 0.5, cap: 4, maxAttempts: 6, random: () => 1 },
    sleep: async (s) => void waits.push(s),
    fetch: async () => (calls++, json(503, { error: "budget_exceeded" })),
  });
  await assert.rejects(http.query({ artifact: "current" }), (e) => e.code === "busy" && e.relayCode === "budget_exceeded");
  assert.equal(calls, 6);
  assert.deepEqual(waits, [0.5, 1, 2, 4, 4]);
});

test("429 waits Retry-After; a refused token starts a full round; network failures retry", async () => {
  const waits = [];
  const answers = [
    () => json(429, { error: "rate_limited" }, { "Retry-After": "2" }),
    () => { throw new TypeError("fetch failed"); },
    () => json(400, { error: "invalid_progress" }),
    () => json(200, { events: [], removed: [], progress: "fresh", more: false, reset: true }),
  ];
  const seen = [];
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    retry: { random: () => 0 },
    sleep: async (s) => void waits.push(s),
    fetch: async (url, init) => {
      if (init.method === "GET") return json(200, INFO);
      seen.push(JSON.parse(new TextDecoder().decode(init.body))[0].progress);
      return answers.shift()();
    },
  });
  const store = new MemoryStore();
  await store.open("k");
  // A collection that holds a finished round's token the relay will refuse.
  await store.applyPage("k", { expectedVersion: 0, target: 1, clearTarget: true, page: parsePage({ events: [], removed: [], progress: "old", more: false, reset: true }), continuable: true, swap: true });
  const syncer = new Syncer({ http, store, key: "k" });
  const summary = await syncer.runRound();
  assert.deepEqual(seen, ["old", "old", "old", null]);
  assert.equal(waits[0], 2);
  assert.equal(summary.kind, "full");
  assert.equal(summary.resets, 1);
  assert.equal((await store.state("k")).progress, "fresh");
});

test("offline writes queue in the outbox (kept in storage) and go in order when the relay is back", async () => {
  let online = false;
  const sent = [];
  const fetchImpl = async (url, init) => {
    if (!online) throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } });
    const event = JSON.parse(new TextDecoder().decode(init.body));
    sent.push(event.id);
    return json(200, ["OK", event.id, true, ""]);
  };
  const store = new SqliteStore(":memory:");
  const signer = keySigner(SECRET);
  const make = () => new Publisher({ http: new RelayHttp(RelayAddress.parse("http://relay.test"), signer, { fetch: fetchImpl, retry: { connectAttempts: 1 } }), store, key: "k", signer });
  const publisher = make();
  const a = await publisher.createArtifact({ channel: CHANNELS[0], type: "buzz.task", title: "a" });
  assert.equal(a.status, "queued");
  const d = a.event.tags[1][1];
  const b = await publisher.updateArtifact(d, { title: "b" });
  assert.equal(b.status, "queued");
  assert.deepEqual(b.event.tags.find((t) => t[0] === "prev"), ["prev", a.event.id], "prev follows the queued write");
  online = true;
  const c = await publisher.createArtifact({ channel: CHANNELS[1], type: "buzz.task", title: "c" });
  assert.equal(c.status, "queued", "a write made while others wait queues behind them");
  // A new publisher over the same storage (a reload) finds the outbox and sends it in order.
  const outcomes = [];
  const again = make();
  again.options.onOutcome = (o) => outcomes.push(o.status);
  assert.equal(await again.flush(), 3);
  assert.deepEqual(sent, [a.event.id, b.event.id, c.event.id]);
  assert.deepEqual(outcomes, ["accepted", "accepted", "accepted"]);
  assert.deepEqual(await store.outboxList("k"), []);
});

test("a key is generated once, kept in storage, with a warning; a passed key wins", async () => {
  const store = new MemoryStore();
  const warnings = [];
  const first = await BuzzClient.open({ relay: "http://relay.test", store, useNip07: false, warn: (m) => warnings.push(m) });
  const second = await BuzzClient.open({ relay: "http://relay.test", store, useNip07: false, warn: (m) => warnings.push(m) });
  assert.equal(first.signerSource, "generated");
  assert.equal(second.signerSource, "stored");
  assert.equal(first.pubkey, second.pubkey);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /unencrypted/);
  const passed = await BuzzClient.open({ relay: "http://relay.test", store, secretKey: SECRET, useNip07: false });
  assert.equal(passed.signerSource, "passed");
  globalThis.nostr = keySigner(generateSecretHex());
  try {
    const nip07 = await BuzzClient.open({ relay: "http://relay.test", store, secretKey: SECRET });
    assert.equal(nip07.signerSource, "nip07");
  } finally {
    delete globalThis.nostr;
  }
});

test("without artifacts.incremental every round is full and no token of that time is continued", async () => {
  let incremental = false;
  const sent = [];
  let n = 0;
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    fetch: async (url, init) => {
      if (init.method === "GET") return json(200, incremental ? INFO : { supported_extensions: [] });
      sent.push(JSON.parse(new TextDecoder().decode(init.body))[0].progress);
      n += 1;
      return json(200, { events: [head(uuidOf(n), CHANNELS[0], `t${n}`)], removed: [], progress: `t${n}`, more: false, reset: sent.at(-1) === null });
    },
  });
  const store = new MemoryStore();
  await store.open("k");
  const syncer = new Syncer({ http, store, key: "k" });
  const rounds = [await syncer.runRound(), await syncer.runRound()];
  assert.deepEqual(rounds.map((r) => [r.kind, r.incremental]), [["full", false], ["full", false]]);
  incremental = true;
  const back = await syncer.runRound(); // a token made while not advertised is never sent
  assert.equal(back.kind, "full");
  const next = await syncer.runRound();
  assert.equal(next.kind, "continuation");
  assert.deepEqual(sent, [null, null, null, "t3"]);
});

test("a page is checked while the one before commits, yet a bad page still finds that one applied and reported", async () => {
  // Page 1 is valid, page 2 carries an event whose signature was altered. The store takes its
  // time to commit (as IndexedDB does), so page 2 is checked while page 1 is still committing.
  const [d1, d2] = [uuidOf(1), uuidOf(2)];
  const good = head(d1, CHANNELS[0], "one");
  const forged = { ...head(d2, CHANNELS[0], "two"), content: "forged" };
  const bodies = [
    { events: [good], removed: [], progress: "p1", more: true, reset: false },
    { events: [JSON.parse(JSON.stringify(forged))], removed: [], progress: "p2", more: false, reset: false },
  ];
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    fetch: async (url, init) => (init.method === "GET" ? json(200, INFO) : json(200, bodies.shift())),
  });
  const store = new MemoryStore();
  const commits = [];
  const apply = store.applyPage.bind(store);
  store.applyPage = async (key, plan) => {
    await new Promise((resolve) => setTimeout(resolve, 30));
    commits.push(plan.page.progress);
    return apply(key, plan);
  };
  await store.open("k");
  const reported = [];
  const syncer = new Syncer({ http, store, key: "k" });
  await assert.rejects(syncer.runRound({ onPage: (p) => reported.push(p.page.progress) }), /does not match/);
  assert.deepEqual(commits, ["p1"]);
  assert.deepEqual(reported, ["p1"]);
  assert.equal((await store.state("k")).progress, "p1");
  assert.equal((await store.state("k")).roundOpen, true);
});

/** A browser Worker's shape over a Node worker thread running dist/verify-worker.js. */
class ThreadWorker {
  constructor() {
    this.thread = new NodeWorker(new URL("./verify-worker-node.mjs", import.meta.url));
    this.thread.unref();
    this.onmessage = null;
    this.onerror = null;
    this.thread.on("message", (data) => this.onmessage?.({ data }));
    this.thread.on("error", (error) => this.onerror?.(error));
  }
  postMessage(message) {
    this.thread.postMessage(message);
  }
  terminate() {
    void this.thread.terminate();
  }
}

/** A worker that fails as soon as it is asked (a page whose CSP refused it, say). */
class BrokenWorker {
  postMessage() {
    setTimeout(() => this.onerror?.(new Error("worker failed to start")), 1);
  }
  terminate() {}
}

/** The worker's shape around `worker`, counting the answers it gives (a worker that answers
 * nothing leaves every check to the calling thread, and the round would still pass). */
function counted(worker) {
  const shape = {
    answers: 0,
    postMessage: (message) => worker.postMessage(message),
    terminate: () => worker.terminate(),
    set onmessage(listen) {
      worker.onmessage = (message) => {
        shape.answers += 1;
        listen(message);
      };
    },
    set onerror(listen) {
      worker.onerror = listen;
    },
  };
  return shape;
}

// [name, a new worker, whether it answers (else the calling thread checks)]
for (const [name, makeWorker, answers] of [
  ["a worker", () => new ThreadWorker(), true],
  ["a broken worker (this thread instead)", () => new BrokenWorker(), false],
  // Node's own: the package's verify-thread.js, and a thread whose script throws as it starts.
  ["a Node worker thread (nodeVerifyWorker)", () => nodeVerifyWorker(), true],
  ["a Node thread that fails to start (this thread instead)", () => nodeVerifyWorker(new URL("./verify-thread-broken.mjs", import.meta.url)), false],
]) {
  test(`signatures checked by ${name}: a valid round applies, a forged event stops the round after the page before`, async () => {
    const pages = (forge) => {
      const events = Array.from({ length: 6 }, (_, i) => JSON.parse(JSON.stringify(head(uuidOf(100 + i), CHANNELS[i % 3], `w${i}`))));
      if (forge) events[4] = { ...events[4], tags: [...events[4].tags, ["x", "y"]] };
      return [
        { events: events.slice(0, 3), removed: [], progress: "p1", more: true, reset: false },
        { events: events.slice(3), removed: [], progress: "p2", more: false, reset: false },
      ];
    };
    for (const forge of [false, true]) {
      const bodies = pages(forge);
      const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
        fetch: async (url, init) => (init.method === "GET" ? json(200, INFO) : json(200, bodies.shift())),
      });
      const store = new MemoryStore();
      await store.open("k");
      const worker = counted(makeWorker());
      try {
        const syncer = new Syncer({ http, store, key: "k", verifyWorker: () => worker });
        if (forge) {
          await assert.rejects(syncer.runRound(), /whose id or signature does not match/);
          assert.equal((await store.state("k")).progress, "p1");
        } else {
          const summary = await syncer.runRound();
          assert.equal(summary.pages, 2);
          assert.equal(await store.count("k"), 6);
        }
        // Each page was checked by the worker (the forged one too), or by none of them.
        assert.equal(worker.answers, answers ? 2 : 0);
      } finally {
        worker.terminate();
      }
    }
  });
}

test("a page's verify worker is sent the page's text, which parses to the events applied", async () => {
  const events = Array.from({ length: 3 }, (_, i) => JSON.parse(JSON.stringify(head(uuidOf(200 + i), CHANNELS[i % 3], `t${i}`))));
  const body = { events, removed: [], progress: "p1", more: false, reset: false };
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    fetch: async (url, init) => (init.method === "GET" ? json(200, INFO) : json(200, body)),
  });
  const store = new MemoryStore();
  await store.open("k");
  const asked = [];
  const worker = {
    onmessage: null,
    onerror: null,
    postMessage(message) {
      asked.push(message);
      setTimeout(() => this.onmessage({ data: { id: message.id, bad: -1 } }), 1);
    },
    terminate() {},
  };
  await new Syncer({ http, store, key: "k", verifyWorker: () => worker }).runRound();
  assert.equal(asked.length, 1);
  assert.equal(asked[0].events, undefined);
  assert.deepEqual(JSON.parse(asked[0].text).events, events);
  assert.equal(await store.count("k"), 3);
  // A worker given text that is not a page answers with an error (the caller then checks).
  assert.throws(() => requestedEvents({ id: 1, text: "{}" }), /no events/);
  assert.deepEqual(requestedEvents({ id: 1, text: JSON.stringify(body) }), events);
});

test("with a worker, a page is written while the next one's signatures are checked, or at once while the next is still coming or the store commits elsewhere", async () => {
  // Three pages; the worker answers after 5 ms. The order of checks handed to the worker and of
  // pages applied shows the overlap: page N is applied after page N+1's check went out when
  // page N+1 had arrived, and before it when the relay is still serving it (slow) or the store
  // commits off this thread (IndexedDB: its commit should start at once).
  for (const [slow, elsewhere] of [[false, false], [true, false], [false, true]]) {
    const events = Array.from({ length: 6 }, (_, i) => JSON.parse(JSON.stringify(head(uuidOf(300 + i), CHANNELS[i % 3], `o${i}`))));
    const bodies = [0, 1, 2].map((i) => ({ events: events.slice(2 * i, 2 * i + 2), removed: [], progress: `p${i + 1}`, more: i < 2, reset: i === 0 }));
    const order = [];
    const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
      fetch: async (url, init) => {
        if (init.method === "GET") return json(200, INFO);
        const body = bodies.shift();
        if (slow && body.progress !== "p1") await new Promise((resolve) => setTimeout(resolve, 60));
        return json(200, body);
      },
    });
    const store = new MemoryStore();
    if (elsewhere) Object.defineProperty(store, "writesOnCallingThread", { value: undefined });
    await store.open("k");
    const apply = store.applyPage.bind(store);
    store.applyPage = (key, plan) => {
      order.push(`apply ${plan.page.progress}`);
      return apply(key, plan);
    };
    const worker = {
      onmessage: null,
      onerror: null,
      postMessage(message) {
        order.push(`check ${JSON.parse(message.text).progress}`);
        setTimeout(() => this.onmessage({ data: { id: message.id, bad: -1 } }), 5);
      },
      terminate() {},
    };
    const reported = [];
    const summary = await new Syncer({ http, store, key: "k", verifyWorker: () => worker }).runRound({ onPage: (p) => reported.push(p.page.progress) });
    assert.deepEqual(order, slow || elsewhere
      ? ["check p1", "apply p1", "check p2", "apply p2", "check p3", "apply p3"]
      : ["check p1", "check p2", "apply p1", "check p3", "apply p2", "apply p3"]);
    assert.deepEqual(reported, ["p1", "p2", "p3"]);
    assert.equal(summary.pages, 3);
    assert.equal(await store.count("k"), 6);
    assert.equal((await store.state("k")).progress, "p3");
  }
});

test("a page kept for the next one's check is still applied when the next page's fetch fails", async () => {
  // Page 2 arrives, page 3's request fails for good: page 1 (checked, waiting for page 2's
  // check) and page 2 are applied and reported before the error reaches the caller.
  const events = Array.from({ length: 4 }, (_, i) => JSON.parse(JSON.stringify(head(uuidOf(400 + i), CHANNELS[i % 3], `f${i}`))));
  const bodies = [
    { events: events.slice(0, 2), removed: [], progress: "p1", more: true, reset: true },
    { events: events.slice(2), removed: [], progress: "p2", more: true, reset: false },
  ];
  const http = new RelayHttp(RelayAddress.parse("http://relay.test"), keySigner(SECRET), {
    retry: { maxAttempts: 1 },
    fetch: async (url, init) => {
      if (init.method === "GET") return json(200, INFO);
      const body = bodies.shift();
      return body ? json(200, body) : json(400, { error: "invalid_filter" });
    },
  });
  const store = new MemoryStore();
  await store.open("k");
  const worker = {
    onmessage: null,
    onerror: null,
    postMessage(message) {
      setTimeout(() => this.onmessage({ data: { id: message.id, bad: -1 } }), 5);
    },
    terminate() {},
  };
  const reported = [];
  await assert.rejects(new Syncer({ http, store, key: "k", verifyWorker: () => worker }).runRound({ onPage: (p) => reported.push(p.page.progress) }), /invalid_filter/);
  assert.deepEqual(reported, ["p1", "p2"]);
  const state = await store.state("k");
  assert.equal(state.progress, "p2");
  assert.equal(state.roundOpen, true);
});

test("a Node verify thread holds the process open while it checks a page, and not after", () => {
  // Awaiting an answer with nothing else pending: the process must wait for it (else Node ends
  // it mid-round), and then exit although the thread was never terminated.
  const script = `
    import { nodeVerifyWorker } from ${JSON.stringify(new URL("../dist/node-verify.js", import.meta.url).href)};
    const worker = nodeVerifyWorker();
    const answer = await new Promise((resolve) => {
      worker.onmessage = ({ data }) => resolve(data);
      worker.postMessage({ id: 7, events: ${JSON.stringify([head(uuidOf(1), CHANNELS[0], "t")])} });
    });
    console.log(JSON.stringify(answer));`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20_000 });
  assert.deepEqual(JSON.parse(out), { id: 7, bad: -1 });
});

// The first SQLite layout (user_version 0), exactly as SqliteStore wrote it before version 2:
// a file of that time, for the migration test.
const SQLITE_VERSION_0 = `
CREATE TABLE collections (key TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE artifacts (
  key TEXT NOT NULL, slot INTEGER NOT NULL, d TEXT NOT NULL, event_id TEXT NOT NULL, channel TEXT NOT NULL,
  type TEXT, title TEXT, created_at INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (key, slot, d)
) WITHOUT ROWID;
CREATE INDEX artifacts_channel ON artifacts (key, slot, channel);
CREATE INDEX artifacts_modified ON artifacts (key, slot, created_at);
CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, event TEXT NOT NULL, queued_at INTEGER NOT NULL);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIEW collection_artifacts AS
  SELECT a.key AS collection, a.d, a.event_id, a.channel, a.type, a.title, a.created_at, a.event
  FROM artifacts AS a JOIN collections AS c ON c.key = a.key
  WHERE a.slot = json_extract(c.state, '$.liveSlot');
`;

test("sqlite: a file of the first layout is migrated once, whole: collections, tokens, both slots, outbox and meta", async () => {
  const { default: Database } = await import("better-sqlite3");
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(`${tmpdir()}/buzz-sqlite-v0-`);
  const path = `${dir}/old.sqlite`;
  try {
    // Two collections written as the old code wrote them: A finished a round (live slot 1, its
    // token), B is in the middle of a full round (rows staged in slot 1, live rows in slot 0).
    const keys = ['["http://a",1]', '["http://b",2]'];
    const events = Array.from({ length: 6 }, (_, i) => JSON.parse(JSON.stringify(head(uuidOf(200 + i), CHANNELS[i % 3], `old ${i}`))));
    const states = [
      { version: 3, liveSlot: 1, targetSlot: null, roundOpen: false, complete: true, continuable: true, progress: "token-a" },
      { version: 5, liveSlot: 0, targetSlot: 1, roundOpen: true, complete: false, continuable: true, progress: "token-b" },
    ];
    const old = new Database(path);
    old.exec(SQLITE_VERSION_0);
    const put = old.prepare("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    const row = (key, slot, event) => {
      const r = rowOf(event);
      put.run(key, slot, r.d, r.eventId, r.channel, r.type, r.title, r.createdAt, JSON.stringify(event));
    };
    keys.forEach((key, i) => old.prepare("INSERT INTO collections VALUES (?, ?)").run(key, JSON.stringify({ ...emptyState(), ...states[i] })));
    for (const event of events.slice(0, 3)) row(keys[0], 1, event);
    for (const event of events.slice(3, 5)) row(keys[1], 0, event);
    row(keys[1], 1, events[5]);
    old.prepare("INSERT INTO outbox (key, event, queued_at) VALUES (?, ?, ?)").run(keys[0], JSON.stringify(events[0]), 1234);
    old.prepare("INSERT INTO meta VALUES (?, ?)").run("signer", "kept");
    old.close();

    const store = new SqliteStore(path);
    assert.equal(store.db.pragma("user_version", { simple: true }), 2);
    assert.deepEqual(store.db.prepare("SELECT name FROM pragma_table_info('artifacts')").all().map((c) => c.name)[0], "collection");
    assert.deepEqual(store.db.prepare("SELECT name FROM sqlite_master WHERE name LIKE '%_v0'").all(), []);
    for (const [i, key] of keys.entries()) assert.deepEqual(await store.state(key), { ...emptyState(), ...states[i] });
    assert.deepEqual((await store.query(keys[0], {})).map((r) => r.d).sort(), events.slice(0, 3).map((e) => rowOf(e).d).sort());
    assert.deepEqual((await store.query(keys[1], {})).map((r) => r.d).sort(), events.slice(3, 5).map((e) => rowOf(e).d).sort());
    assert.deepEqual(await store.get(keys[0], rowOf(events[1]).d), rowOf(events[1]));
    assert.deepEqual((await store.outboxList(keys[0])).map((o) => [o.event.id, o.queuedAt]), [[events[0].id, 1234]]);
    assert.equal(await store.getMeta("signer"), "kept");
    // Other programs' view: still the live slot of each collection, named by its key.
    assert.deepEqual(store.db.prepare("SELECT collection, count(*) AS n FROM collection_artifacts GROUP BY collection ORDER BY collection").all(),
      [{ collection: keys[0], n: 3 }, { collection: keys[1], n: 2 }]);
    // B's open round goes on from its token: its last page lands beside the staged row, and the
    // swap makes slot 1 live with both.
    const page = parsePage({ events: [events[4]], removed: [], progress: "token-b2", more: false, reset: false }, false);
    const applied = await store.applyPage(keys[1], { expectedVersion: 5, target: 1, clearTarget: false, page, continuable: true, swap: true });
    assert.equal(applied.state.liveSlot, 1);
    assert.deepEqual((await store.query(keys[1], {})).map((r) => r.d).sort(), [events[4], events[5]].map((e) => rowOf(e).d).sort());
    await store.close();
    // Opened again: already version 2, nothing to do, the same collection.
    const again = new SqliteStore(path);
    assert.equal((await again.state(keys[1])).progress, "token-b2");
    assert.equal(await again.count(keys[0]), 3);
    await again.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("IndexedDB: a first sync going live hands over its rows as the swap's changes, re-read unless this store saw the whole round", async () => {
  const [a, b, c, e, f] = [1, 2, 3, 5, 6].map((n) => stamped(uuidOf(n), CHANNELS[n % 3], `Task ${n}`, 1_700_000_000 + n));
  const pages = [
    parsePage({ events: [a, b, c], removed: [], progress: "p1", more: true, reset: true }, true),
    parsePage({ events: [e], removed: [{ d: uuidOf(2), reason: "deleted" }], progress: "p2", more: true, reset: false }, true),
    parsePage({ events: [f], removed: [], progress: "p3", more: false, reset: false }, true),
  ];
  const plan = (n) => ({ expectedVersion: n, target: 1, clearTarget: n === 0, page: pages[n], continuable: true, swap: n === 2 });
  for (const split of [false, true]) {
    const factory = new IDBFactory();
    const store = await IndexedDbStore.open("first", factory, IDBKeyRange);
    await store.open("k");
    await store.applyPage("k", plan(0));
    await store.applyPage("k", plan(1));
    // split: the round's last page written by another object (another tab, a reload): it did
    // not see the round's first pages, so the collection is read again.
    const last = split ? await IndexedDbStore.open("first", factory, IDBKeyRange) : store;
    const { changes } = await last.applyPage("k", plan(2));
    assert.equal(changes.added, 4);
    if (split) {
      assert.equal(changes.upserted, null);
      assert.equal(changes.deleted, null);
    } else {
      assert.deepEqual(changes.upserted.map((r) => r.d).sort(), [1, 3, 5, 6].map(uuidOf));
      assert.deepEqual(changes.upserted.map((r) => r.eventId).sort(), [a, c, e, f].map((x) => x.id).sort());
      assert.deepEqual(changes.deleted, []);
    }
    assert.deepEqual((await store.query("k", {})).map((r) => r.d).sort(), [1, 3, 5, 6].map(uuidOf));
    // A later full round over a live slot that holds rows: re-read, as before.
    const again = parsePage({ events: [a], removed: [], progress: "q1", more: false, reset: true }, true);
    const swapped = await store.applyPage("k", { expectedVersion: 3, target: 0, clearTarget: true, page: again, continuable: true, swap: true });
    assert.equal(swapped.changes.upserted, null);
    assert.deepEqual([swapped.changes.added, swapped.changes.removed], [0, 3]);
    await store.close();
    if (split) await last.close();
  }
});

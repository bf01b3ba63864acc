// What the tests against a real relay share. tests/buzz_sync_js/test_node_suite.py starts the
// relay (`buzz-admin serve` on the pytest database), makes ALICE a community admin, serves a
// small control endpoint for what only the relay's operator can do (bump the epoch, rotate the
// key, run buzz-sync for parity, start a rate-limited relay), and runs `node --test` with:
//   BUZZ_RELAY_URL, BUZZ_ALICE_SECRET, BUZZ_CONTROL_URL, BUZZ_TMP
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";

import { BuzzClient, MemoryStore, generateSecretHex } from "../dist/index.js";
import { SqliteStore } from "../dist/sqlite.js";

export const RELAY = process.env.BUZZ_RELAY_URL;
export const ALICE = process.env.BUZZ_ALICE_SECRET;
export const CONTROL = process.env.BUZZ_CONTROL_URL;
export const against = RELAY ? {} : { skip: "BUZZ_RELAY_URL not set (run through tests/buzz_sync_js)" };
const TMP = process.env.BUZZ_TMP ?? mkdtempSync("/tmp/buzz-sync-js-");
let files = 0;

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function control(action, body = {}) {
  const response = await fetch(`${CONTROL}/${action}`, { method: "POST", body: JSON.stringify(body) });
  const text = await response.text();
  assert.equal(response.status, 200, `control ${action}: ${text}`);
  return JSON.parse(text);
}

/** A reader's client: SQLite in a fresh file unless `store` is given; no live stream. */
export async function reader(options = {}) {
  const store = options.store ?? new SqliteStore(join(TMP, `reader-${process.pid}-${files++}.sqlite`));
  return BuzzClient.open({ relay: RELAY, store, live: false, useNip07: false, secretKey: options.secret ?? generateSecretHex(), ...options });
}

export async function heads(client) {
  return new Map((await client.query()).map((row) => [row.d, row.eventId]));
}

const sameHeads = (a, b) => a.size === b.size && [...a].every(([d, id]) => b.get(d) === id);

/** Rounds until the collection is `expected` (usually one; a transaction open on the
 * database when a write committed may hold its round's fence back). */
export async function catchUp(client, expected, rounds = 8) {
  const done = [];
  for (let i = 0; i < rounds; i += 1) {
    done.push(...(await client.syncNow()));
    if (sameHeads(await heads(client), expected)) return done;
    await sleep(500);
  }
  assert.deepEqual(Object.fromEntries(await heads(client)), Object.fromEntries(expected), `never caught up: ${JSON.stringify(done)}`);
  return done;
}

/** (added, updated, removed, resets) over rounds. */
export const totals = (summaries) => [
  summaries.reduce((n, s) => n + s.added, 0),
  summaries.reduce((n, s) => n + s.updated, 0),
  summaries.reduce((n, s) => n + s.removed, 0),
  summaries.reduce((n, s) => n + s.resets, 0),
];

export const kinds = (summaries) => new Set(summaries.map((s) => s.kind));

/** A fresh client's first full round: the oracle a kept collection must equal. */
export async function freshRead(secret, options = {}) {
  const fresh = await reader({ secret, store: new MemoryStore(), ...options });
  const [first] = await fresh.syncNow();
  assert.equal(first.kind, "full");
  return heads(fresh);
}

function ok(published) {
  assert.equal(published.status, "accepted", published.message);
  return published;
}

/** Alice (a community admin) writing through the package's own publisher; what each reader
 * should hold is tracked here independently (d -> channel and head id). */
export class World {
  static async create() {
    const world = new World();
    world.alice = await reader({ secret: ALICE, store: new MemoryStore() });
    return world;
  }

  heads = new Map();

  async channel(name, { private: isPrivate = true, members = [] } = {}) {
    const published = ok(await this.alice.createChannel(name, { private: isPrivate }));
    const h = published.event.tags[0][1];
    for (const pubkey of members) ok(await this.alice.putMember(h, pubkey));
    return h;
  }

  async create(h, n = 1, type = "buzz.task") {
    const made = [];
    for (let i = 0; i < n; i += 1) {
      const { event } = ok(await this.alice.createArtifact({ channel: h, type, title: `item ${i}`, content: "{}" }));
      const d = event.tags[1][1];
      this.heads.set(d, { h, id: event.id });
      made.push(d);
    }
    return made;
  }

  async update(d, title = "changed") {
    const { h, id } = this.heads.get(d);
    const { event } = ok(await this.alice.updateArtifact(d, { title, prev: id }));
    this.heads.set(d, { h, id: event.id });
  }

  async move(d, to) {
    const { id } = this.heads.get(d);
    const { event } = ok(await this.alice.moveArtifact(d, to, { prev: id }));
    this.heads.set(d, { h: to, id: event.id });
  }

  async delete(d) {
    const { id } = this.heads.get(d);
    ok(await this.alice.deleteArtifact(d, { prev: id }));
    this.heads.delete(d);
  }

  async redact(d) {
    const { h, id } = this.heads.get(d);
    ok(await this.alice.publish(9005, [["h", h], ["e", id]]));
    this.heads.delete(d);
  }

  grant = async (h, pubkey) => ok(await this.alice.putMember(h, pubkey));
  remove = async (h, pubkey) => ok(await this.alice.removeMember(h, pubkey));
  makePrivate = async (h) => ok(await this.alice.editChannel(h, { visibility: "private" }));
  makePublic = async (h) => ok(await this.alice.editChannel(h, { visibility: "public" }));

  readable(channels) {
    return new Map([...this.heads].filter(([, { h }]) => channels.has(h)).map(([d, { id }]) => [d, id]));
  }
}

// The app API against the relay: the live stream (NIP-42) triggers rounds, subscriptions see
// each change, publishing over the WebSocket returns the OK, and writes made while the relay
// cannot be reached go out in order when it can, a conflict reported with the current head.
import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryStore, generateSecretHex, keySigner } from "../dist/index.js";
import { World, against, reader, sleep } from "./helpers.mjs";

async function until(condition, what, ms = 15000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(50);
  }
}

test("a live client hears another client's write, a subscription sees it, first-sync and progress fire", against, async () => {
  const world = await World.create();
  const bob = generateSecretHex();
  const bobPub = await keySigner(bob).getPublicKey();
  const h = await world.channel("live", { members: [bobPub] });
  await world.create(h, 3);
  // Polling every 10 minutes: only the live stream can bring the write in time.
  const client = await reader({ secret: bob, store: new MemoryStore(), live: true, pollInterval: 600, safetyInterval: 600, publishVia: "websocket" });
  const updates = [];
  client.subscribe({ channel: h, orderBy: "modified" }, (update) => updates.push(update));
  const progress = [];
  client.onProgress((p) => progress.push(p));
  client.start();
  try {
    await client.firstSync;
    await until(async () => updates.at(-1)?.rows.length === 3, "the first round's rows");
    await until(() => progress.at(-1).live, "the live stream");
    assert.ok(progress.some((p) => p.round && p.round.pages >= 1));
    const [d] = await world.create(h);
    await until(() => updates.some((u) => u.added.some((row) => row.d === d)), "the live write");
    assert.equal(updates.at(-1).rows.length, 4);
    await world.update(d, "renamed");
    await until(() => updates.some((u) => u.updated.some((row) => row.d === d && row.title === "renamed")), "the update");
    // Publishing over the WebSocket: the relay's OK, then the round it triggers.
    const made = await client.createArtifact({ channel: h, type: "buzz.task", title: "over ws" });
    assert.equal(made.status, "accepted", made.message);
    const mine = made.event.tags[1][1];
    await until(() => updates.some((u) => u.added.some((row) => row.d === mine)), "our own write");
    const order = updates.at(-1).rows.map((row) => row.createdAt);
    assert.deepEqual(order, [...order].sort((a, b) => b - a), "ordered by modification");
  } finally {
    await client.close();
  }
});

test("offline writes wait in the outbox, go in order on reconnect, and a CAS loss comes back with the current head", against, async () => {
  const world = await World.create();
  const bob = generateSecretHex();
  const bobPub = await keySigner(bob).getPublicKey();
  const h = await world.channel("offline", { members: [bobPub] });
  const [d] = await world.create(h);
  let offline = false;
  const fetchThrough = (url, init) => (offline ? Promise.reject(new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } })) : fetch(url, init));
  const client = await reader({ secret: bob, fetch: fetchThrough, retry: { connectAttempts: 1, maxAttempts: 2, base: 0.05 } });
  await client.syncNow();
  offline = true;
  const first = await client.createArtifact({ channel: h, type: "buzz.task", title: "made offline" });
  const second = await client.updateArtifact(first.event.tags[1][1], { title: "edited offline" });
  const stale = await client.updateArtifact(d, { title: "bob's edit" });
  assert.deepEqual([first.status, second.status, stale.status], ["queued", "queued", "queued"]);
  await world.update(d, "alice got there first"); // the relay's head moves on meanwhile
  const outcomes = [];
  client.onOutcome((outcome) => outcomes.push(outcome));
  offline = false;
  assert.equal(await client.flushOutbox(), 3);
  assert.deepEqual(outcomes.map((o) => o.status), ["accepted", "accepted", "refused"]);
  const conflict = outcomes[2];
  assert.match(conflict.message, /^invalid: artifact head changed/);
  assert.equal(conflict.conflict.d, d);
  assert.equal(conflict.conflict.currentHead.eventId, world.heads.get(d).id);
  assert.equal(conflict.conflict.currentHead.title, "alice got there first");
  assert.deepEqual(await client.publisher.outbox(), []);
  await client.syncNow();
  assert.equal((await client.get(first.event.tags[1][1])).title, "edited offline");
});

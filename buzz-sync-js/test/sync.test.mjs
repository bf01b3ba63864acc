// PROTOCOL.md section 5 against the real relay: every case buzz-sync's tests cover
// (tests/buzzclient/test_against_relay.py), through this package.
import assert from "node:assert/strict";
import { test } from "node:test";

import { MemoryStore, generateSecretHex, keySigner } from "../dist/index.js";
import { SqliteStore } from "../dist/sqlite.js";
import { World, against, catchUp, control, freshRead, heads, kinds, reader, sleep, totals } from "./helpers.mjs";

async function setup() {
  const world = await World.create();
  const bob = generateSecretHex();
  const bobPub = await keySigner(bob).getPublicKey();
  const team = await world.channel("team", { members: [bobPub] });
  const other = await world.channel("other", { members: [bobPub] });
  const secret = await world.channel("secret");
  return { world, bob, bobPub, team, other, secret };
}

test("the first full round holds exactly what the reader may read, as the relay stores it", against, async () => {
  const { world, bob, team, other, secret } = await setup();
  await world.create(team, 9);
  await world.create(other, 6);
  await world.create(secret, 4);
  const client = await reader({ secret: bob, pageLimit: 4 });
  const info = await client.syncer.relayInfo();
  assert.ok(info.incremental && info.queryEndpoint === "/query" && info.incrementalViewChanges);
  const rounds = await catchUp(client, world.readable(new Set([team, other])));
  assert.equal(rounds[0].kind, "full");
  assert.ok(rounds[0].pages >= 4);
  assert.deepEqual(totals(rounds), [15, 0, 0, 0]);
  const row = (await client.query({ channel: team }))[0];
  assert.equal(row.event.id, row.eventId);
  assert.deepEqual(row.event.tags.find((t) => t[0] === "d"), ["d", row.d]);
});

test("continuation rounds deliver only the changes; a quiet round changes nothing", against, async () => {
  const { world, bob, team, other, secret } = await setup();
  const ds = [...(await world.create(team, 8)), ...(await world.create(other, 3))];
  const client = await reader({ secret: bob, pageLimit: 3 });
  await catchUp(client, world.readable(new Set([team, other])));
  await world.update(ds[0]);
  await world.update(ds[9]);
  await world.create(other);
  await world.create(secret); // not the reader's business
  const rounds = await catchUp(client, world.readable(new Set([team, other])));
  assert.deepEqual(kinds(rounds), new Set(["continuation"]));
  assert.deepEqual(totals(rounds), [1, 2, 0, 0]);
  const [quiet] = await client.syncNow();
  assert.equal(quiet.kind, "continuation");
  assert.deepEqual(totals([quiet]), [0, 0, 0, 0]);
});

test("a resumed round is finished, then one more round brings what was written since", against, async () => {
  const { world, bob, team, other } = await setup();
  await world.create(team, 6);
  const store = new MemoryStore();
  const first = await reader({ secret: bob, pageLimit: 2, store });
  await first.syncer.runRound({ maxPages: 1 }); // interrupted after one of three pages
  assert.equal((await store.state(first.key)).roundOpen, true);
  assert.equal((await first.query()).length, 0, "a staged full round stays invisible");
  const later = (await world.create(other))[0];
  const again = await reader({ secret: bob, pageLimit: 2, store });
  const rounds = await again.syncNow();
  assert.deepEqual(rounds.map((r) => [r.kind, r.resumed]), [["full", true], ["continuation", false]]);
  assert.ok((await heads(again)).has(later));
  assert.deepEqual(await heads(again), world.readable(new Set([team, other])));
});

test("removals reach the collection: delete, move away, move within, redaction", against, async () => {
  const { world, bob, team, other, secret } = await setup();
  const ds = await world.create(team, 6);
  const client = await reader({ secret: bob, pageLimit: 2 });
  await catchUp(client, world.readable(new Set([team, other])));
  await world.delete(ds[0]);
  await world.move(ds[1], secret); // away, out of the reader's sight
  await world.move(ds[2], other); // still readable: an update, not a removal
  await world.redact(ds[3]);
  const expected = world.readable(new Set([team, other]));
  const rounds = await catchUp(client, expected);
  assert.deepEqual(kinds(rounds), new Set(["continuation"]));
  assert.deepEqual(totals(rounds), [0, 1, 3, 0]);
  assert.equal((await client.get(ds[2])).channel, other);
  assert.deepEqual(await freshRead(bob), await heads(client));
});

test("with the opt-in, view changes cost their channels: removed_channels and the catch-up", against, async () => {
  const { world, bob, bobPub, team, other } = await setup();
  const open = await world.channel("open", { private: false });
  try {
    await world.create(open, 5);
    await world.create(team, 2);
    const client = await reader({ secret: bob, pageLimit: 3, filter: { channels: [open, team] } });
    await catchUp(client, world.readable(new Set([open, team])));
    await world.makePrivate(open);
    const closed = await catchUp(client, world.readable(new Set([team])));
    assert.deepEqual(kinds(closed), new Set(["continuation"]));
    assert.deepEqual(totals(closed), [0, 0, 5, 0]);
    await world.grant(open, bobPub);
    const granted = await catchUp(client, world.readable(new Set([open, team])));
    assert.deepEqual(kinds(granted), new Set(["continuation"]));
    assert.deepEqual(totals(granted), [5, 0, 0, 0]);
    assert.ok(granted.reduce((n, r) => n + r.items, 0) <= 2 * 5 + 3);
    // A member removed: the channel leaves the view, again without a reset.
    await world.remove(team, bobPub);
    const removed = await catchUp(client, world.readable(new Set([open])));
    assert.deepEqual(totals(removed), [0, 0, 2, 0]);
    assert.deepEqual(await freshRead(bob, { filter: { channels: [open, team] } }), await heads(client));
  } finally {
    await world.makePrivate(open); // no open channel leaks into other tests' readers
  }
});

test("without the opt-in, a grant and a removal reset the collection, which stays right", against, async () => {
  const { world, bob, bobPub, team, other } = await setup();
  await world.create(team, 3);
  await world.create(other, 2);
  const extra = await world.channel("extra");
  await world.create(extra, 2);
  const client = await reader({ secret: bob, pageLimit: 2, viewChanges: "reset" });
  await catchUp(client, world.readable(new Set([team, other])));
  await world.grant(extra, bobPub);
  const granted = await catchUp(client, world.readable(new Set([team, other, extra])));
  assert.ok(totals(granted)[3] >= 1, "a grant resets a reader that did not opt in");
  assert.equal(totals(granted)[0], 2);
  await world.remove(team, bobPub);
  const removed = await catchUp(client, world.readable(new Set([other, extra])));
  assert.ok(totals(removed)[3] >= 1);
  assert.equal(totals(removed)[2], 3);
  assert.deepEqual(await freshRead(bob), await heads(client));
});

test("a page limit of 1 still converges, through moves in and out", against, async () => {
  const { world, bob, team, other, secret } = await setup();
  const ds = await world.create(team, 4);
  const hidden = await world.create(secret, 2);
  const client = await reader({ secret: bob, pageLimit: 1 });
  const first = await catchUp(client, world.readable(new Set([team, other])));
  assert.equal(first[0].pages, 5); // four items, one per page, and the last (empty) page
  await world.move(ds[0], other);
  await world.move(hidden[0], team); // in from a channel the reader cannot see
  await world.move(ds[1], secret);
  const rounds = await catchUp(client, world.readable(new Set([team, other])));
  assert.deepEqual(totals(rounds), [1, 1, 1, 0]);
  assert.deepEqual(await freshRead(bob, { pageLimit: 1 }), await heads(client));
});

test("publishing returns the relay's OK: accepted, duplicate, restricted", against, async () => {
  const { world, bob, secret, team } = await setup();
  const bobClient = await reader({ secret: bob });
  const refused = await bobClient.createArtifact({ channel: secret, type: "buzz.note", title: "no" });
  assert.equal(refused.status, "refused");
  assert.match(refused.message, /^restricted:/);
  const made = await bobClient.createArtifact({ channel: team, type: "buzz.note", title: "from bob" });
  assert.equal(made.status, "accepted");
  const again = await bobClient.http.publish(made.event);
  assert.ok(again.accepted && again.message.startsWith("duplicate:"));
  world.heads.set(made.event.tags[1][1], { h: team, id: made.event.id });
  await catchUp(bobClient, world.readable(new Set([team])));
  // prev from the local head, then a stale prev is a CAS loss reported with the current head.
  const d = made.event.tags[1][1];
  const updated = await bobClient.updateArtifact(d, { title: "changed by bob" });
  assert.equal(updated.status, "accepted");
  assert.deepEqual(updated.event.tags.find((t) => t[0] === "prev"), ["prev", made.event.id]);
  const stale = await bobClient.updateArtifact(d, { title: "stale", prev: made.event.id });
  assert.equal(stale.status, "refused");
  assert.match(stale.message, /^invalid: artifact head changed/);
  assert.equal(stale.conflict.currentHead.eventId, updated.event.id);
});

test("every write kind: channel create/edit, member put/remove, artifact create/update/move/delete/restore", against, async () => {
  const { world, bob, bobPub, team } = await setup();
  const alice = world.alice;
  const h = await world.channel("kinds", { members: [bobPub] });
  const renamed = await alice.editChannel(h, { name: "renamed" });
  assert.equal(renamed.status, "accepted");
  const role = await alice.putMember(h, bobPub, "admin");
  assert.equal(role.status, "accepted");
  const bobClient = await reader({ secret: bob, filter: { channels: [h, team] } });
  const made = await bobClient.createArtifact({ channel: h, type: "buzz.task", title: "t", content: '{"done":false}' });
  const d = made.event.tags[1][1];
  await bobClient.syncNow();
  assert.equal((await bobClient.updateArtifact(d, { content: '{"done":true}' })).status, "accepted");
  await bobClient.syncNow();
  assert.equal((await bobClient.moveArtifact(d, team)).status, "accepted");
  await bobClient.syncNow();
  assert.equal((await bobClient.get(d)).channel, team);
  assert.equal((await bobClient.deleteArtifact(d)).status, "accepted");
  await bobClient.syncNow();
  assert.equal(await bobClient.get(d), undefined);
  const restored = await bobClient.restoreArtifact(d);
  assert.equal(restored.status, "accepted", restored.message);
  await bobClient.syncNow();
  const row = await bobClient.get(d);
  assert.equal(row.title, "t");
  assert.equal(row.content, '{"done":true}');
  assert.equal(row.op, "restore");
  assert.equal((await alice.removeMember(h, bobPub)).status, "accepted");
});

test("a round run as soon as a write's OK returns holds that write (read-your-writes)", against, async () => {
  const { world, bob, team } = await setup();
  const client = await reader({ secret: bob, pageLimit: 10 });
  await client.syncNow();
  for (let attempt = 0; attempt < 10; attempt += 1) {
    const [d] = await world.create(team);
    const [summary] = await client.syncNow();
    assert.equal(summary.kind, "continuation");
    assert.equal(summary.added, 1, `attempt ${attempt}`);
    assert.equal((await heads(client)).get(d), world.heads.get(d).id);
  }
});

test("429 Retry-After is honoured for exactly as long as it says", against, async () => {
  const { world, bob, team } = await setup();
  await world.create(team, 6);
  const { url } = await control("limited-relay");
  try {
    const waits = [];
    const client = await reader({ secret: bob, relay: url, pageLimit: 1 });
    client.http.sleep = async (seconds) => {
      waits.push(seconds);
      await sleep(seconds * 1000);
    };
    const started = performance.now();
    const [summary] = await client.syncNow();
    const elapsed = (performance.now() - started) / 1000;
    assert.equal(summary.added, 6);
    assert.equal(summary.pages, 7);
    assert.ok(client.http.stats.rateLimited >= 3);
    assert.deepEqual(waits, client.http.stats.retryAfter);
    assert.ok(waits.every((w) => w >= 1));
    assert.ok(elapsed >= waits.reduce((a, b) => a + b, 0));
  } finally {
    await control("stop-limited-relay");
  }
});

test("an epoch bump resets the collection; the old one stays visible until the new round ends", against, async () => {
  const { world, bob, team } = await setup();
  await world.create(team, 5);
  const store = new SqliteStore(":memory:");
  const client = await reader({ secret: bob, pageLimit: 2, store });
  await catchUp(client, world.readable(new Set([team])));
  await control("bump-epoch");
  const page = await client.syncer.runRound({ maxPages: 1 });
  assert.equal(page.resets, 1);
  assert.equal((await client.query()).length, 5, "the staged round does not empty what the app shows");
  const rounds = await catchUp(client, world.readable(new Set([team])));
  assert.equal(rounds[0].kind, "full");
  assert.deepEqual(totals(rounds).slice(0, 3), [0, 0, 0]);
});

test("a key rotation resets tokens of the retired key; the collection comes back whole", against, async () => {
  const { world, bob, team } = await setup();
  const ds = await world.create(team, 4);
  const client = await reader({ secret: bob, pageLimit: 3 });
  await catchUp(client, world.readable(new Set([team])));
  await control("rotate-key");
  try {
    await world.update(ds[0]);
    const rounds = await catchUp(client, world.readable(new Set([team])));
    assert.equal(totals(rounds)[3], 1, JSON.stringify(rounds));
    assert.equal(rounds[0].kind, "full");
    assert.deepEqual(totals(rounds).slice(0, 3), [0, 1, 0]);
    const [next] = await client.syncNow();
    assert.equal(next.kind, "continuation");
    assert.equal(next.resets, 0);
  } finally {
    await control("restore-key");
  }
});

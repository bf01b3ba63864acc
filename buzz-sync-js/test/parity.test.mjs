// Parity: on a seeded random schedule of writes, grants, removals and moves, this package
// (with and without the view-change opt-in), buzz-sync (the Python client, run by the test's
// control endpoint on the same relay) and a fresh full read converge to the same collection.
import assert from "node:assert/strict";
import { test } from "node:test";

import { generateSecretHex, keySigner } from "../dist/index.js";
import { random } from "./seeded.mjs";
import { World, against, catchUp, control, freshRead, heads, reader } from "./helpers.mjs";


test("TypeScript client, buzz-sync and a fresh full read converge on a seeded random schedule", against, async () => {
  const seed = Number(process.env.BUZZ_PARITY_SEED ?? 34);
  const rand = random(seed);
  const pick = (list) => list[Math.floor(rand() * list.length)];
  const world = await World.create();
  const bob = generateSecretHex();
  const bobPub = await keySigner(bob).getPublicKey();
  const channels = [];
  for (let i = 0; i < 4; i += 1) channels.push(await world.channel(`parity ${i}`, { members: i < 2 ? [bobPub] : [] }));
  const member = new Set(channels.slice(0, 2));
  const incremental = await reader({ secret: bob, pageLimit: 3 });
  const resetting = await reader({ secret: bob, pageLimit: 5, viewChanges: "reset" });
  const log = [];
  for (let step = 0; step < 36; step += 1) {
    const r = rand();
    const live = [...world.heads.keys()];
    if (r < 0.35 || live.length < 3) {
      const h = pick(channels);
      await world.create(h);
      log.push(`create in ${channels.indexOf(h)}`);
    } else if (r < 0.5) {
      await world.update(pick(live));
      log.push("update");
    } else if (r < 0.65) {
      const to = pick(channels);
      const d = pick(live);
      if (world.heads.get(d).h !== to) {
        await world.move(d, to);
        log.push(`move to ${channels.indexOf(to)}`);
      }
    } else if (r < 0.72) {
      await world.delete(pick(live));
      log.push("delete");
    } else if (r < 0.76) {
      await world.redact(pick(live));
      log.push("redact");
    } else if (r < 0.88) {
      const h = pick(channels);
      if (member.has(h)) {
        await world.remove(h, bobPub);
        member.delete(h);
        log.push(`remove from ${channels.indexOf(h)}`);
      } else {
        await world.grant(h, bobPub);
        member.add(h);
        log.push(`grant ${channels.indexOf(h)}`);
      }
    } else {
      // A round in the middle of the schedule, so later rounds are continuations.
      await incremental.syncNow();
      await resetting.syncNow();
      await control("buzz-sync", { secret: bob, name: `parity-${seed}`, page_limit: 4 });
      log.push("sync");
    }
  }
  const expected = world.readable(member);
  await catchUp(incremental, expected);
  await catchUp(resetting, expected);
  const python = await control("buzz-sync", { secret: bob, name: `parity-${seed}`, page_limit: 4, rounds: 2 });
  const context = `seed ${seed}: ${log.join(", ")}`;
  assert.deepEqual(new Map(Object.entries(python.heads)), expected, context);
  assert.deepEqual(await heads(incremental), expected, context);
  assert.deepEqual(await freshRead(bob), expected, context);
});

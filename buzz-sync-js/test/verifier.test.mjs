// The WebAssembly signature checker (libsecp256k1, verifier/build.sh) against nostr-tools'
// @noble/curves check on the same events: valid ones, and each part of a valid one altered
// (content, tags, time, kind, id, public key, signature, including keys off the curve and
// signature halves out of range). A checker that accepted anything, or refused a valid event,
// fails here.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { schnorr } from "@noble/curves/secp256k1.js";
import { finalizeEvent, generateSecretKey, getPublicKey, verifyEvent as nobleVerify } from "nostr-tools/pure";

import { SECP256K1_WASM } from "../dist/secp256k1-wasm.js";
import { keySigner } from "../dist/signer.js";
import { firstForged, loadWasmSigner, loadWasmVerifier } from "../dist/verifier.js";
import { random } from "./seeded.mjs";

const P = "fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2f"; // the field's prime
const N = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"; // the group's order

function events(count, rand) {
  const keys = [generateSecretKey(), generateSecretKey(), generateSecretKey()];
  const found = [];
  for (let i = 0; i < count; i += 1) {
    const title = ["task", "tâche \u{1F41D}", "\"quoted\"\n\\", ""][Math.floor(rand() * 4)] + i;
    const tags = [["d", crypto.randomUUID()], ["h", crypto.randomUUID()], ["type", "buzz.task"], ["title", title]];
    const content = rand() < 0.05 ? "x".repeat(200_000) : JSON.stringify({ done: rand() < 0.5, note: title });
    // As served: plain JSON (finalizeEvent marks its result verified, which noble then trusts).
    found.push(JSON.parse(JSON.stringify(finalizeEvent({ kind: 45010, created_at: 1_700_000_000 + i, tags, content }, keys[i % 3]))));
  }
  return found;
}

const flipHex = (hex, at) => hex.slice(0, at) + ((parseInt(hex[at], 16) ^ 1).toString(16)) + hex.slice(at + 1);

function altered(event, rand, others) {
  const at = (n) => Math.floor(rand() * n);
  const other = others[at(others.length)];
  const changes = [
    { content: event.content + " " },
    { tags: [...event.tags, ["x", "y"]] },
    { created_at: event.created_at + 1 },
    { kind: 45011 },
    { id: flipHex(event.id, at(64)) },
    { sig: flipHex(event.sig, at(128)) },
    { pubkey: flipHex(event.pubkey, at(64)) },
    { pubkey: other.pubkey },
    { sig: other.sig },
    { sig: P + event.sig.slice(64) }, // r = p: not a field element
    { sig: event.sig.slice(0, 64) + N }, // s = n: not a scalar
    { pubkey: P }, // x = p: not a field element
    { pubkey: "0".repeat(64) },
    { id: event.id.toUpperCase() }, // ids are lowercase hex (NIP-01)
    { sig: event.sig.slice(0, 127) },
  ];
  return { ...event, ...changes[at(changes.length)] };
}

test("the committed module is the one src/secp256k1-wasm.ts carries", () => {
  const file = readFileSync(new URL("../verifier/secp256k1.wasm", import.meta.url));
  assert.deepEqual(Buffer.from(SECP256K1_WASM, "base64"), file);
  const header = readFileSync(new URL("../src/secp256k1-wasm.ts", import.meta.url), "utf8");
  assert.ok(header.includes(createHash("sha256").update(file).digest("hex")));
});

test("libsecp256k1 in WebAssembly agrees with @noble/curves on valid and altered events", async () => {
  const verify = await loadWasmVerifier();
  const rand = random(34);
  const valid = events(300, rand);
  for (const event of valid) assert.equal(verify(event), true, `valid event ${event.id} refused`);
  let refused = 0;
  for (let round = 0; round < 3; round += 1) {
    for (const event of valid) {
      const bad = altered(event, rand, valid);
      const expected = nobleVerify({ ...bad });
      assert.equal(verify(bad), expected, `disagrees with noble on ${JSON.stringify(bad).slice(-400)}`);
      if (!expected) refused += 1;
    }
  }
  assert.ok(refused >= 800, `only ${refused} of 900 altered events were refused`);
  // After the large events grew its memory, the module still checks small ones.
  for (const event of valid.slice(0, 20)) assert.equal(verify(event), true);
});

test("a page checked as one batch reports the first event that fails on its own, and accepts a valid page", async () => {
  const verify = await loadWasmVerifier();
  const rand = random(3434);
  const valid = events(120, rand);
  assert.equal(firstForged(verify, valid), -1);
  assert.equal(firstForged(verify, valid.slice(0, 2)), -1);
  for (let round = 0; round < 60; round += 1) {
    const page = valid.slice();
    const at = Math.floor(rand() * page.length);
    page[at] = altered(page[at], rand, valid);
    let expected = nobleVerify({ ...page[at] }) ? -1 : at;
    if (round % 3 === 0) {
      // A second bad event after the first: the first is still the one reported.
      const later = at + 1 + Math.floor(rand() * (page.length - at - 1));
      if (later < page.length) {
        page[later] = { ...page[later], sig: valid[(later + 1) % valid.length].sig };
        if (expected === -1) expected = later;
      }
    }
    assert.equal(firstForged(verify, page), expected, `round ${round}: altered event at ${at}`);
  }
  // Two valid signatures swapped between events of one key: each fails alone, and the batch
  // (whose sum could not tell which signature goes with which event) refuses the page too.
  const swapped = valid.slice();
  swapped[0] = { ...valid[0], sig: valid[3].sig };
  swapped[3] = { ...valid[3], sig: valid[0].sig };
  assert.equal(firstForged(verify, swapped), 0);
});

test("libsecp256k1's signatures in WebAssembly are @noble/curves' for the same key, id and aux", async () => {
  const rand = random(98);
  for (let k = 0; k < 5; k += 1) {
    const secret = generateSecretKey();
    const signer = await loadWasmSigner(secret);
    assert.equal(signer.publicKey, getPublicKey(secret));
    for (let i = 0; i < 20; i += 1) {
      const id = createHash("sha256").update(String(rand())).digest();
      const aux = createHash("sha256").update(String(rand())).digest();
      const sig = signer.sign(id.toString("hex"), new Uint8Array(aux));
      assert.equal(sig, Buffer.from(schnorr.sign(id, secret, aux)).toString("hex"));
      // Fresh auxiliary randomness: another valid signature of the same id.
      const fresh = signer.sign(id.toString("hex"));
      assert.notEqual(fresh, sig);
      assert.ok(schnorr.verify(Buffer.from(fresh, "hex"), id, Buffer.from(signer.publicKey, "hex")));
    }
  }
  await assert.rejects(loadWasmSigner(new Uint8Array(32)), /not a valid secret key/);
  await assert.rejects(loadWasmSigner(Buffer.from(N, "hex")), /not a valid secret key/);
  const signer = await loadWasmSigner(generateSecretKey());
  assert.throws(() => signer.sign("ab"), /64 lowercase hex/);
});

test("a key signer's events (libsecp256k1 in WebAssembly) verify with @noble/curves", async () => {
  const secret = generateSecretKey();
  const signer = keySigner(secret);
  const template = { kind: 27235, created_at: 1_700_000_000, tags: [["u", "http://x/"], ["method", "GET"]], content: "tâche \u{1F41D}" };
  const event = await signer.signEvent(template);
  assert.equal(event.pubkey, getPublicKey(secret));
  assert.deepEqual({ kind: event.kind, created_at: event.created_at, tags: event.tags, content: event.content }, template);
  assert.equal(nobleVerify({ ...event }), true);
  const again = await signer.signEvent(template);
  assert.equal(again.id, event.id);
  assert.notEqual(again.sig, event.sig); // fresh auxiliary randomness each time
  assert.equal(nobleVerify({ ...again }), true);
  assert.equal(await signer.getPublicKey(), getPublicKey(secret));
  assert.throws(() => keySigner("0".repeat(64)), /below the curve's order/);
  assert.throws(() => keySigner(N), /below the curve's order/);
});

/**
 * Checks a served event's id and BIP-340 signature with libsecp256k1 compiled to WebAssembly
 * (verifier/build.sh: the library's own 10x26 field, which WebAssembly multiplies natively;
 * ~55 us an event against nostr-wasm's ~220 us on the same machine). The hash and the check
 * are the library's; this file only lays the event out in the module's memory: id, public
 * key and signature as bytes, then the NIP-01 serialization whose SHA-256 must be the id.
 * A page's events are checked at once (BIP-340 batch verification, verify.c).
 */

import { bytesToHex } from "@noble/hashes/utils.js";

import type { NostrEvent } from "./types.js";

const HEX = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i += 1) HEX["0123456789abcdef".charCodeAt(i)] = i;

/** Lowercase hex of exactly `bytes` bytes into `into` at `at`; false on anything else. */
function hexInto(into: Uint8Array, at: number, text: string, bytes: number): boolean {
  if (typeof text !== "string" || text.length !== bytes * 2) return false;
  for (let i = 0; i < bytes; i += 1) {
    const hi = HEX[text.charCodeAt(2 * i)] ?? -1;
    const lo = HEX[text.charCodeAt(2 * i + 1)] ?? -1;
    if (hi < 0 || lo < 0) return false;
    into[at + i] = (hi << 4) | lo;
  }
  return true;
}

function base64Bytes(text: string): Uint8Array<ArrayBuffer> {
  // Node decodes natively (~0.1 ms for the module's 178 KB of base64, against 2-6 ms for the
  // loop below, paid on the round's thread and again in its verify thread); browsers loop.
  const NodeBuffer = (globalThis as { Buffer?: { from(text: string, encoding: "base64"): Uint8Array } }).Buffer;
  if (NodeBuffer !== undefined) return new Uint8Array(NodeBuffer.from(text, "base64")) as Uint8Array<ArrayBuffer>;
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** Checks one event, or (`firstForged`) a page of them at once. */
export type EventVerifier = ((event: NostrEvent) => boolean) & {
  /** The index of the first event whose id or signature does not hold, -1 if all hold. */
  firstForged?: (events: readonly NostrEvent[]) => number;
};

interface Exports {
  memory: WebAssembly.Memory;
  buzz_buffer(size: number): number;
  buzz_verify_event(at: number, length: number): number;
  buzz_verify_batch(at: number, count: number, seed: number): number;
  buzz_sign_init(seed: number): number;
  buzz_keypair(at: number): number;
  buzz_sign(at: number): number;
}

let compiled: Promise<WebAssembly.Module> | null = null;

/** An instance of the module (compiled once; its bytes are a chunk of their own in a bundle:
 * imported on first use). Rejects where WebAssembly is missing or refused (a CSP without
 * 'wasm-unsafe-eval'). */
async function instantiate(): Promise<Exports> {
  compiled ??= import("./secp256k1-wasm.js").then(({ SECP256K1_WASM }) => WebAssembly.compile(base64Bytes(SECP256K1_WASM)));
  compiled.catch(() => { compiled = null; });
  const instance = await WebAssembly.instantiate(await compiled, {});
  return instance.exports as unknown as Exports;
}

/** A BIP-340 signer for one secret key: `sign(id)` is the signature (hex) of a 32-byte event id
 * (hex). `aux` is BIP-340's auxiliary randomness, drawn fresh unless given (tests). */
export interface WasmSigner {
  publicKey: string;
  sign(id: string, aux?: Uint8Array): string;
}

/** libsecp256k1's signing in the same module (its own instance); rejects as `loadWasmVerifier`
 * does, or for a secret key that is not one. */
export async function loadWasmSigner(secret: Uint8Array): Promise<WasmSigner> {
  const wasm = await instantiate();
  // One area: keypair (96) | message (32) | aux (32) | signature (64); the secret goes in first.
  const at = wasm.buzz_buffer(256);
  if (at === 0) throw new RangeError("the signer's memory is exhausted");
  const area = (): Uint8Array => new Uint8Array(wasm.memory.buffer, at, 256);
  crypto.getRandomValues(area().subarray(0, 32));
  if (wasm.buzz_sign_init(at) !== 1) throw new Error("libsecp256k1 could not make a signing context");
  area().set(secret, 0);
  const made = wasm.buzz_keypair(at);
  const keypair = area().slice(32, 128);
  const publicKey = bytesToHex(area().subarray(128, 160));
  area().fill(0);
  if (made !== 1) throw new RangeError("not a valid secret key");
  return {
    publicKey,
    sign(id: string, aux?: Uint8Array): string {
      const bytes = area();
      bytes.set(keypair, 0);
      if (!hexInto(bytes, 96, id, 32)) throw new RangeError("an event id is 64 lowercase hex characters");
      if (aux) bytes.set(aux, 128);
      else crypto.getRandomValues(bytes.subarray(128, 160));
      const ok = wasm.buzz_sign(at) === 1;
      const signature = bytesToHex(area().subarray(160, 224));
      area().fill(0, 0, 96);
      if (!ok) throw new Error("libsecp256k1 could not sign");
      return signature;
    },
  };
}

/** Compiles the module; rejects where WebAssembly is missing or refused (a CSP without
 * 'wasm-unsafe-eval'). */
export async function loadWasmVerifier(): Promise<EventVerifier> {
  const wasm = await instantiate();
  const encoder = new TextEncoder();
  let memory = new Uint8Array(wasm.memory.buffer);
  // The module's allocator may grow its memory (detaching the old view) in any call.
  const view = (): Uint8Array => {
    if (memory.buffer !== wasm.memory.buffer) memory = new Uint8Array(wasm.memory.buffer);
    return memory;
  };
  // A buffer the module allocated (and keeps) for us; UTF-8 takes at most 3 bytes per UTF-16 unit.
  const buffer = (size: number): number => {
    const at = wasm.buzz_buffer(size);
    if (at === 0) throw new RangeError("the signature checker's memory is exhausted");
    return at;
  };
  const serialize = (event: NostrEvent): string =>
    JSON.stringify([0, event.pubkey, event.created_at, event.kind, event.tags, event.content]);

  const verify: EventVerifier = (event: NostrEvent): boolean => {
    const serialized = serialize(event);
    const at = buffer(128 + serialized.length * 3);
    const bytes = view();
    if (!hexInto(bytes, at, event.id, 32) || !hexInto(bytes, at + 32, event.pubkey, 32) || !hexInto(bytes, at + 64, event.sig, 64)) {
      return false;
    }
    const { written } = encoder.encodeInto(serialized, bytes.subarray(at + 128, at + 128 + serialized.length * 3));
    return wasm.buzz_verify_event(at, written) === 1;
  };
  const oneByOne = (events: readonly NostrEvent[]): number => {
    for (let i = 0; i < events.length; i += 1) if (!verify(events[i])) return i;
    return -1;
  };
  // A page at once: every id hashed, then one BIP-340 batch equation for all the signatures
  // (verify.c's buzz_verify_batch: ~2.5x fewer CPU per event than one check each on 1,000
  // events, docs/performance.md). A page that fails it is checked one event at a time, so the
  // event reported is the first that fails on its own, as without the batch.
  verify.firstForged = (events: readonly NostrEvent[]): number => {
    if (events.length < 2) return oneByOne(events);
    const texts = events.map(serialize);
    let size = 32;
    for (const text of texts) size += 132 + text.length * 3 + 3;
    const seed = buffer(size);
    const bytes = view();
    crypto.getRandomValues(bytes.subarray(seed, seed + 32));
    let at = seed + 32;
    for (let i = 0; i < events.length; i += 1) {
      const event = events[i];
      if (!hexInto(bytes, at + 4, event.id, 32) || !hexInto(bytes, at + 36, event.pubkey, 32) || !hexInto(bytes, at + 68, event.sig, 64)) {
        return oneByOne(events);
      }
      const { written } = encoder.encodeInto(texts[i], bytes.subarray(at + 132, at + 132 + texts[i].length * 3));
      bytes[at] = written & 255;
      bytes[at + 1] = (written >>> 8) & 255;
      bytes[at + 2] = (written >>> 16) & 255;
      bytes[at + 3] = written >>> 24;
      at += (132 + written + 3) & ~3;
    }
    if (wasm.buzz_verify_batch(seed + 32, events.length, seed) === 1) return -1;
    return oneByOne(events);
  };
  return verify;
}

/** The index of the first event whose id or signature does not hold, -1 if all hold (what a
 * verifying worker answers: verify-worker.ts in a browser, verify-thread.ts in Node). */
export function firstForged(verify: EventVerifier, events: readonly NostrEvent[]): number {
  if (verify.firstForged) return verify.firstForged(events);
  for (let i = 0; i < events.length; i += 1) if (!verify(events[i])) return i;
  return -1;
}

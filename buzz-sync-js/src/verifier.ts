/**
 * Checks a served event's id and BIP-340 signature with libsecp256k1 compiled to WebAssembly
 * (verifier/build.sh: the library's own 10x26 field, which WebAssembly multiplies natively;
 * ~55 us an event against nostr-wasm's ~220 us on the same machine). The hash and the check
 * are the library's; this file only lays the event out in the module's memory: id, public
 * key and signature as bytes, then the NIP-01 serialization whose SHA-256 must be the id.
 */

import type { NostrEvent } from "./types.js";

export type EventVerifier = (event: NostrEvent) => boolean;

interface Exports {
  memory: WebAssembly.Memory;
  __heap_base: WebAssembly.Global;
  buzz_verify_event(at: number, length: number): number;
}

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
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** Compiles the module (its bytes are a chunk of their own in a bundle: imported on first use).
 * Rejects where WebAssembly is missing or refused (a CSP without 'wasm-unsafe-eval'). */
export async function loadWasmVerifier(): Promise<EventVerifier> {
  const { SECP256K1_WASM } = await import("./secp256k1-wasm.js");
  const instance = await WebAssembly.instantiate(await WebAssembly.compile(base64Bytes(SECP256K1_WASM)), {});
  const wasm = instance.exports as unknown as Exports;
  const base = Number(wasm.__heap_base.value);
  const encoder = new TextEncoder();
  let memory = new Uint8Array(wasm.memory.buffer);
  return (event: NostrEvent): boolean => {
    const serialized = JSON.stringify([0, event.pubkey, event.created_at, event.kind, event.tags, event.content]);
    // UTF-8 takes at most 3 bytes per UTF-16 unit; the module's memory past __heap_base is ours.
    const needed = base + 128 + serialized.length * 3;
    if (needed > wasm.memory.buffer.byteLength) wasm.memory.grow(Math.ceil((needed - wasm.memory.buffer.byteLength) / 65536));
    if (memory.buffer !== wasm.memory.buffer) memory = new Uint8Array(wasm.memory.buffer);
    if (!hexInto(memory, base, event.id, 32) || !hexInto(memory, base + 32, event.pubkey, 32) || !hexInto(memory, base + 64, event.sig, 64)) {
      return false;
    }
    const { written } = encoder.encodeInto(serialized, memory.subarray(base + 128));
    return wasm.buzz_verify_event(base, written) === 1;
  };
}

/** The index of the first event whose id or signature does not hold, -1 if all hold (what a
 * verifying worker answers: verify-worker.ts in a browser, verify-thread.ts in Node). */
export function firstForged(verify: EventVerifier, events: readonly NostrEvent[]): number {
  for (let i = 0; i < events.length; i += 1) if (!verify(events[i])) return i;
  return -1;
}

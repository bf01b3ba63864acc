/**
 * Who signs: a NIP-07 extension (`window.nostr`) when the browser has one, otherwise a secret
 * key the app passes in, otherwise a key generated once and kept in the collection's storage
 * (with a warning: such a key is only as safe as the browser profile or file it lives in).
 *
 * A key's signatures are libsecp256k1's (the WebAssembly module that also checks served
 * events, verifier.ts), falling back to nostr-tools' `finalizeEvent` (the audited
 * @noble/curves) where WebAssembly is refused; nothing here does elliptic-curve work by hand.
 */

import { finalizeEvent, generateSecretKey, getEventHash, getPublicKey } from "nostr-tools/pure";
import { bytesToHex, hexToBytes } from "nostr-tools/utils";
import * as nip19 from "nostr-tools/nip19";

import { BuzzError } from "./errors.js";
import type { EventTemplate, NostrEvent } from "./types.js";
import { isHex64 } from "./types.js";
import { loadWasmSigner, type WasmSigner } from "./verifier.js";

export interface Signer {
  getPublicKey(): Promise<string>;
  signEvent(template: EventTemplate): Promise<NostrEvent>;
}

/** What NIP-07 puts on `window.nostr`. */
export interface Nip07 {
  getPublicKey(): Promise<string>;
  signEvent(template: EventTemplate): Promise<NostrEvent>;
}

/** A signer from a secret key: 64 hex characters, `nsec1...`, or 32 bytes. */
export function keySigner(secret: string | Uint8Array): Signer {
  const bytes = parseSecret(secret);
  const scalar = BigInt("0x" + bytesToHex(bytes));
  if (scalar === 0n || scalar >= CURVE_ORDER) throw new BuzzError("bad_input", "a secret key must be below the curve's order and not zero");
  // Every request carries a NIP-98 signature: @noble/curves took ~4.6 ms of CPU each here, and
  // ~50 ms for its tables on first use (the public key included), libsecp256k1 in WebAssembly
  // ~0.3 ms (docs/performance.md). Loaded on first use; where WebAssembly is refused, noble signs.
  let wasm: Promise<WasmSigner | null> | null = null;
  const loaded = (): Promise<WasmSigner | null> => (wasm ??= loadWasmSigner(bytes).catch(() => null));
  let pubkey: string | undefined;
  return {
    getPublicKey: async () => (pubkey ??= (await loaded())?.publicKey ?? getPublicKey(bytes)),
    signEvent: async (template) => {
      const signer = await loaded();
      if (signer === null) return finalizeEvent(template, bytes) as NostrEvent;
      const unsigned = { kind: template.kind, created_at: template.created_at, tags: template.tags, content: template.content, pubkey: signer.publicKey };
      const id = getEventHash(unsigned);
      return { ...unsigned, id, sig: signer.sign(id) };
    },
  };
}

/** The order of secp256k1's group: a secret key is an integer in [1, n - 1]. */
const CURVE_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

export function parseSecret(secret: string | Uint8Array): Uint8Array {
  if (secret instanceof Uint8Array) {
    if (secret.length !== 32) throw new BuzzError("bad_input", "a secret key is 32 bytes");
    return secret;
  }
  const text = secret.trim();
  if (text.startsWith("nsec1")) {
    const decoded = nip19.decode(text);
    if (decoded.type !== "nsec") throw new BuzzError("bad_input", "not an nsec key");
    return decoded.data;
  }
  if (!isHex64(text.toLowerCase())) {
    throw new BuzzError("bad_input", "a secret key is 64 hex characters or nsec1...");
  }
  return hexToBytes(text.toLowerCase());
}

export function generateSecretHex(): string {
  return bytesToHex(generateSecretKey());
}

export const npubOf = (pubkey: string): string => nip19.npubEncode(pubkey);

/** Where a generated key is kept: the storage adapter's small key-value table. */
export interface KeyStorage {
  getMeta(name: string): Promise<string | undefined>;
  setMeta(name: string, value: string): Promise<void>;
}

export const GENERATED_KEY_META = "generated-secret-key";

export interface SignerChoice {
  signer: Signer;
  source: "nip07" | "passed" | "generated" | "stored";
}

/**
 * The signer an app gets when it does not choose: `window.nostr` if present, else `secretKey`,
 * else the key generated earlier and kept in `storage`, else a new one (kept there). `warn`
 * hears why a generated key is a risk.
 */
export async function resolveSigner(options: {
  signer?: Signer;
  secretKey?: string | Uint8Array;
  storage: KeyStorage;
  useNip07?: boolean;
  warn?: (message: string) => void;
}): Promise<SignerChoice> {
  if (options.signer) return { signer: options.signer, source: "passed" };
  const nostr = (globalThis as { nostr?: Nip07 }).nostr;
  if (options.useNip07 !== false && nostr && typeof nostr.signEvent === "function") {
    return { signer: nostr, source: "nip07" };
  }
  if (options.secretKey !== undefined) return { signer: keySigner(options.secretKey), source: "passed" };
  const stored = await options.storage.getMeta(GENERATED_KEY_META);
  if (stored) return { signer: keySigner(stored), source: "stored" };
  const secret = generateSecretHex();
  await options.storage.setMeta(GENERATED_KEY_META, secret);
  const pubkey = getPublicKey(hexToBytes(secret));
  (options.warn ?? console.warn)(
    `buzz-sync-js: no NIP-07 signer and no key given; generated key ${npubOf(pubkey)} is kept ` +
      "unencrypted in this app's storage. Anyone who can read that storage can write as it, " +
      "and clearing the storage loses it. Pass a key, or use a NIP-07 extension.",
  );
  return { signer: keySigner(secret), source: "generated" };
}

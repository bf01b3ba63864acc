/**
 * One incremental page (PROTOCOL.md section 5), checked whole before anything is applied: a
 * page is applied in one storage transaction or not at all, so everything that could make
 * applying it fail (shape, tags, ids, signatures) is checked here first.
 */

import { verifyEvent as nobleVerify } from "nostr-tools/pure";

import { BuzzError } from "./errors.js";
import type { ArtifactRow, NostrEvent } from "./types.js";
import { KIND_ARTIFACT, KIND_REMOVAL_MARKER, first, isHex64, isUuid, rowOf } from "./types.js";
import { type EventVerifier, firstForged, loadWasmVerifier } from "./verifier.js";

export interface Page {
  /** Head events (45010) as rows, and any removal markers (45011). */
  events: ArtifactRow[];
  markers: { d: string; prev: string | null }[];
  removed: { d: string; reason: string }[];
  /** Channels that left the reader's view (only with `view_changes: "incremental"`). */
  removedChannels: string[];
  progress: string;
  more: boolean;
  reset: boolean;
}

export const pageItems = (page: Page): number => page.events.length + page.markers.length + page.removed.length;

/** Signature checks dominate a full round's client time. nostr-tools verifies with
 * @noble/curves (pure JS, audited; ~900 us an event here) or, once `useWasmVerifier()`
 * succeeded, with libsecp256k1 compiled to WebAssembly by verifier/build.sh (~55 us: the
 * library bitcoin-core ships and buzz-sync calls natively, so the same checks). WebAssembly
 * needs a CSP that allows 'wasm-unsafe-eval'; without it noble stays. */
let verifyEvent: EventVerifier = (event) => nobleVerify({ ...event });
let wasmTried: Promise<boolean> | null = null;

export function useWasmVerifier(): Promise<boolean> {
  wasmTried ??= loadWasmVerifier()
    .then((verify) => {
      verifyEvent = verify;
      return true;
    })
    .catch(() => false); // no WebAssembly here (or the page's CSP forbids it): noble stays
  return wasmTried;
}

function servedEvent(value: unknown): NostrEvent {
  const e = value as Record<string, unknown>;
  if (
    !e || typeof e !== "object" || Array.isArray(e) || !isHex64(e.id) || !isHex64(e.pubkey) ||
    typeof e.sig !== "string" || !/^[0-9a-f]{128}$/.test(e.sig) || !Number.isInteger(e.created_at) ||
    !Number.isInteger(e.kind) || typeof e.content !== "string" || !Array.isArray(e.tags) ||
    !e.tags.every((tag) => Array.isArray(tag) && tag.every((v) => typeof v === "string"))
  ) {
    const claimed = e && typeof e === "object" && isHex64(e.id) ? ` ${e.id}` : "";
    throw new BuzzError("protocol", `relay served a malformed event${claimed}`);
  }
  return { id: e.id, pubkey: e.pubkey, created_at: e.created_at as number, kind: e.kind as number, tags: e.tags as string[][], content: e.content, sig: e.sig };
}

/** Checks one served 45010/45011 event; `verify` checks its id and BIP-340 signature. */
export function parseArtifactEvent(value: unknown, verify: boolean): NostrEvent {
  const event = servedEvent(value);
  if (event.kind !== KIND_ARTIFACT && event.kind !== KIND_REMOVAL_MARKER) {
    throw new BuzzError("protocol", `relay served an event of kind ${event.kind} in an artifact read`);
  }
  if (!isUuid(first(event.tags, "d")) || !isUuid(first(event.tags, "h"))) {
    throw new BuzzError("protocol", `relay served event ${event.id} without a canonical d or h tag`);
  }
  // The id is the hash of the content and the author signed it: a relay cannot forge or alter
  // an artifact without this failing.
  if (verify && !verifyEvent(event)) throw forged(event);
  return event;
}

export const forged = (event: NostrEvent): BuzzError =>
  new BuzzError("protocol", `relay served event ${event.id} whose id or signature does not match it`);

/** The served events of a page `parsePage(body, false)` accepted (their shape is checked). */
export const servedEvents = (body: unknown): NostrEvent[] => (body as { events: NostrEvent[] }).events;

/** Checks ids and signatures on this thread (what a page's worker could not), all at once
 * where the verifier can (the WebAssembly one's batch); the error names the first that fails. */
export function verifyEvents(events: readonly NostrEvent[]): void {
  const bad = firstForged(verifyEvent, events);
  if (bad >= 0) throw forged(events[bad]);
}

export function parsePage(body: unknown, verify = true): Page {
  if (!body || typeof body !== "object" || Array.isArray(body)) {
    throw new BuzzError("protocol", "relay answered an incremental query without a page object");
  }
  const doc = body as Record<string, unknown>;
  const { events, removed, progress, more, reset } = doc;
  if (!Array.isArray(events) || !Array.isArray(removed)) throw new BuzzError("protocol", "incremental page lacks its events or removed list");
  if (typeof progress !== "string" || !progress) throw new BuzzError("protocol", "incremental page lacks its progress token");
  if (typeof more !== "boolean" || typeof reset !== "boolean") throw new BuzzError("protocol", "incremental page lacks its more/reset flags");
  const heads: ArtifactRow[] = [];
  const markers: Page["markers"] = [];
  const named: string[] = [];
  // Every event's shape first, then their ids and signatures as one batch (as buzz-sync's
  // parse_page does): a malformed event is reported before a forged one.
  const served = events.map((value) => parseArtifactEvent(value, false));
  if (verify) verifyEvents(served);
  for (const event of served) {
    const row = rowOf(event);
    named.push(row.d);
    if (event.kind === KIND_REMOVAL_MARKER) markers.push({ d: row.d, prev: first(event.tags, "prev") });
    else heads.push(row);
  }
  const gone: Page["removed"] = [];
  for (const entry of removed) {
    const e = entry as Record<string, unknown>;
    if (!e || typeof e !== "object" || !isUuid(e.d) || typeof e.reason !== "string") {
      throw new BuzzError("protocol", "incremental page has a malformed removed entry");
    }
    gone.push({ d: e.d, reason: e.reason });
    named.push(e.d);
  }
  if (new Set(named).size !== named.length) {
    // A d appears at most once per page; two entries would make the result depend on the
    // order they are applied in.
    throw new BuzzError("protocol", "incremental page names one artifact twice");
  }
  const removedChannels = doc.removed_channels ?? [];
  if (!Array.isArray(removedChannels) || !removedChannels.every(isUuid)) {
    throw new BuzzError("protocol", "incremental page has a malformed removed_channels list");
  }
  if (removedChannels.length && reset) {
    throw new BuzzError("protocol", "incremental page both resets and removes channels");
  }
  return { events: heads, markers, removed: gone, removedChannels: removedChannels as string[], progress, more, reset };
}

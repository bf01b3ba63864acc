/**
 * Publishing every kind of PROTOCOL.md section 2 that a client sends: artifact create, update,
 * move, delete and restore (kind 45010, `prev` from the local head), channel create and edit
 * (9007, 9002), member put and remove (9000, 9001). Each write goes over NIP-98 `POST /event`
 * (or the live WebSocket's `EVENT`, when the app asks and it is connected) and returns the
 * relay's `OK` unchanged.
 *
 * Offline writes: a write that cannot reach the relay goes to the outbox, in the same storage
 * as the collection, and later writes queue behind it, so the relay sees them in the order they
 * were made. `flush()` (the client calls it on every reconnect) sends them in order. A
 * compare-and-swap loss (`invalid: artifact head changed`) is reported with the artifact's
 * current head, never dropped or retried blindly.
 */

import { BuzzError } from "./errors.js";
import type { OkAnswer, RelayHttp } from "./relay.js";
import type { Signer } from "./signer.js";
import type { OutboxEntry, Store } from "./store.js";
import type { ArtifactRow, NostrEvent } from "./types.js";
import {
  KIND_ARTIFACT, KIND_CREATE_CHANNEL, KIND_EDIT_CHANNEL, KIND_PUT_MEMBER, KIND_REMOVE_MEMBER,
  first, isHex64, isUuid, rowOf,
} from "./types.js";

export const ROLES = ["member", "admin", "owner"] as const;
export type Role = (typeof ROLES)[number];
export const HEAD_CHANGED = "invalid: artifact head changed";
const HISTORY_LIMIT = 1000;

/** The outcome of one write. */
export interface Published {
  event: NostrEvent;
  /** `accepted` / `refused`: the relay's OK; `queued`: in the outbox, not sent yet. */
  status: "accepted" | "refused" | "queued";
  /** The relay's OK message (`""`, `"duplicate: ..."`, `"restricted: ..."`, ...). */
  message: string;
  /** A compare-and-swap loss: the artifact's head as the relay has it now (null: none readable). */
  conflict?: { d: string; currentHead: ArtifactRow | null };
}

export const isConflict = (message: string): boolean => message.startsWith(HEAD_CHANGED);

/** How an event reaches the relay (the client passes the WebSocket's when asked to). */
export type Sender = (event: NostrEvent) => Promise<OkAnswer>;

export function artifactTags(o: { op: string; d: string; channel: string; type: string; title: string | null; prev?: string | null }): string[][] {
  const tags = [["ar", "1"], ["d", o.d], ["h", o.channel], ["type", o.type], ["op", o.op]];
  if (o.title !== null && o.op !== "delete") tags.push(["title", o.title]);
  if (o.prev) tags.push(["prev", o.prev]);
  return tags;
}

function uuid(value: string, what: string): string {
  if (!isUuid(value)) throw new BuzzError("bad_input", `${what} ${JSON.stringify(value)} is not a lowercase canonical UUID`);
  return value;
}

export const newUuid = (): string => crypto.randomUUID();

export interface PublisherOptions {
  http: RelayHttp;
  store: Store;
  key: string;
  signer: Signer;
  /** Overrides `POST /event` (e.g. the live WebSocket). */
  send?: () => Sender | null;
  /** Hears every outcome of an event sent from the outbox. */
  onOutcome?: (outcome: Published) => void;
  /** Whether to try the network at all (`navigator.onLine` in browsers). */
  online?: () => boolean;
}

export class Publisher {
  private readonly http: RelayHttp;
  private readonly store: Store;
  private readonly key: string;
  private readonly signer: Signer;
  private readonly options: PublisherOptions;
  /** Heads of writes still in the outbox: the next write of that `d` follows them. */
  private readonly pending = new Map<string, NostrEvent>();
  private chain: Promise<unknown> = Promise.resolve();
  private loaded = false;

  constructor(options: PublisherOptions) {
    this.http = options.http;
    this.store = options.store;
    this.key = options.key;
    this.signer = options.signer;
    this.options = options;
  }

  /** Serializes writes and flushes: the relay sees events in the order they were made. */
  private serial<T>(task: () => Promise<T>): Promise<T> {
    const next = this.chain.then(task, task);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private async load(): Promise<void> {
    if (this.loaded) return;
    this.loaded = true;
    for (const entry of await this.store.outboxList(this.key)) this.notePending(entry.event);
  }

  private notePending(event: NostrEvent): void {
    if (event.kind !== KIND_ARTIFACT) return;
    this.pending.set(first(event.tags, "d") ?? "", event);
  }

  async outbox(): Promise<OutboxEntry[]> {
    return this.store.outboxList(this.key);
  }

  /** Signs any event and sends it (or queues it); the relay's answer. */
  async publish(kind: number, tags: string[][], content = ""): Promise<Published> {
    const event = await this.signer.signEvent({ kind, created_at: Math.floor(Date.now() / 1000), tags, content });
    return this.serial(async () => {
      await this.load();
      const queued = (await this.store.outboxList(this.key)).length > 0;
      if (!queued && this.online()) {
        try {
          return await this.deliver(event);
        } catch (error) {
          if (!(error instanceof BuzzError && error.code === "unreachable")) throw error;
        }
      }
      await this.store.outboxAdd(this.key, event);
      this.notePending(event);
      return { event, status: "queued", message: "" } satisfies Published;
    });
  }

  private online(): boolean {
    return this.options.online ? this.options.online() : true;
  }

  private async deliver(event: NostrEvent): Promise<Published> {
    const sender = this.options.send?.() ?? null;
    const answer = sender ? await sender(event) : await this.http.publish(event);
    const published: Published = { event, status: answer.accepted ? "accepted" : "refused", message: answer.message };
    if (!answer.accepted && isConflict(answer.message) && event.kind === KIND_ARTIFACT) {
      const d = first(event.tags, "d") ?? "";
      published.conflict = { d, currentHead: await this.relayHead(d) };
    }
    return published;
  }

  /**
   * Sends the outbox in order. Stops (leaving the rest queued) when the relay cannot be
   * reached; every answer, a refusal or a conflict included, is reported to `onOutcome` and
   * takes the entry out of the outbox. Returns how many entries were sent.
   */
  flush(): Promise<number> {
    return this.serial(async () => {
      await this.load();
      let sent = 0;
      for (const entry of await this.store.outboxList(this.key)) {
        let outcome: Published;
        try {
          outcome = await this.deliver(entry.event);
        } catch (error) {
          if (error instanceof BuzzError && error.code === "unreachable") break;
          throw error;
        }
        await this.store.outboxRemove(this.key, entry.id);
        const d = first(entry.event.tags, "d");
        if (d !== null && this.pending.get(d)?.id === entry.event.id) this.pending.delete(d);
        sent += 1;
        this.options.onOutcome?.(outcome);
      }
      return sent;
    });
  }

  // Channels and members.

  createChannel(name: string, options: { private?: boolean; channel?: string } = {}): Promise<Published> {
    const h = options.channel ? uuid(options.channel, "channel") : newUuid();
    if (!name.trim()) throw new BuzzError("bad_input", "a channel needs a name");
    const tags = [["h", h], ["name", name]];
    if (options.private) tags.push(["private"]);
    return this.publish(KIND_CREATE_CHANNEL, tags);
  }

  editChannel(channel: string, options: { name?: string; visibility?: "public" | "private" }): Promise<Published> {
    const tags = [["h", uuid(channel, "channel")]];
    if (options.name !== undefined) tags.push(["name", options.name]);
    if (options.visibility) tags.push([options.visibility]);
    return this.publish(KIND_EDIT_CHANNEL, tags);
  }

  putMember(channel: string, pubkey: string, role: Role = "member"): Promise<Published> {
    if (!ROLES.includes(role)) throw new BuzzError("bad_input", `role must be one of ${ROLES.join(", ")}`);
    if (!isHex64(pubkey)) throw new BuzzError("bad_input", "a pubkey is 64 lowercase hex characters");
    return this.publish(KIND_PUT_MEMBER, [["h", uuid(channel, "channel")], ["p", pubkey, role]]);
  }

  removeMember(channel: string, pubkey: string): Promise<Published> {
    if (!isHex64(pubkey)) throw new BuzzError("bad_input", "a pubkey is 64 lowercase hex characters");
    return this.publish(KIND_REMOVE_MEMBER, [["h", uuid(channel, "channel")], ["p", pubkey]]);
  }

  // Artifacts.

  createArtifact(o: { channel: string; type: string; title: string; content?: string; d?: string }): Promise<Published> {
    const d = o.d ? uuid(o.d, "artifact id") : newUuid();
    if (!o.type) throw new BuzzError("bad_input", "an artifact needs a type");
    const tags = artifactTags({ op: "create", d, channel: uuid(o.channel, "channel"), type: o.type, title: o.title });
    return this.publish(KIND_ARTIFACT, tags, o.content ?? "");
  }

  /** A new revision; the title and content not given are the current head's. */
  async updateArtifact(d: string, o: { title?: string; content?: string; prev?: string } = {}): Promise<Published> {
    return this.revise(await this.currentHead(d, o.prev), "update", o);
  }

  async moveArtifact(d: string, toChannel: string, o: { prev?: string } = {}): Promise<Published> {
    return this.revise(await this.currentHead(d, o.prev), "move", { channel: uuid(toChannel, "channel") });
  }

  async deleteArtifact(d: string, o: { prev?: string } = {}): Promise<Published> {
    return this.revise(await this.currentHead(d, o.prev), "delete", { content: "" });
  }

  /** Brings a deleted artifact back with the title and content it had before (unless given);
   * the deletion is found in the relay's history (a sync forgets deleted items). */
  async restoreArtifact(d: string, o: { title?: string; content?: string; prev?: string } = {}): Promise<Published> {
    const pending = this.pending.get(d);
    const revisions = await this.history(d);
    if (pending) revisions.push(pending);
    const head = o.prev ? revisions.find((e) => e.id === o.prev) : tip(revisions);
    if (!head) throw new BuzzError("not_found", `artifact ${d}: no deletion found in its history`);
    const before = revisions.find((e) => e.id === first(head.tags, "prev"));
    return this.revise(head, "restore", {
      title: o.title ?? (before ? first(before.tags, "title") ?? undefined : undefined),
      content: o.content ?? before?.content ?? "",
    });
  }

  private revise(head: NostrEvent, op: string, o: { title?: string; content?: string; channel?: string }): Promise<Published> {
    const d = first(head.tags, "d") ?? "";
    const title = o.title ?? first(head.tags, "title");
    if (title === null && op !== "delete") throw new BuzzError("bad_input", `artifact ${d}: give a title (its head has none)`);
    const tags = artifactTags({
      op, d, channel: o.channel ?? first(head.tags, "h") ?? "", type: first(head.tags, "type") ?? "", title, prev: head.id,
    });
    return this.publish(KIND_ARTIFACT, tags, o.content ?? head.content);
  }

  /** `d`'s head: a queued write of ours, else the local collection's, else the relay's
   * history's tip. With `prev`, that revision. */
  async currentHead(d: string, prev?: string): Promise<NostrEvent> {
    uuid(d, "artifact id");
    await this.load();
    const pending = this.pending.get(d);
    if (pending && (!prev || pending.id === prev)) return pending;
    const local = await this.store.get(this.key, d);
    if (local && (!prev || local.eventId === prev)) return local.event;
    const revisions = await this.history(d);
    const head = prev ? revisions.find((e) => e.id === prev) : tip(revisions);
    if (!head) throw new BuzzError("not_found", `artifact ${d} is not in the local collection nor readable on ${this.http.address.baseUrl}`);
    return head;
  }

  /** The relay's current readable head of `d` (null: none), for a conflict report. */
  async relayHead(d: string): Promise<ArtifactRow | null> {
    const found = await this.http.query({ artifact: "current", "#d": [d], limit: 1 });
    return Array.isArray(found) && found.length ? rowOf(found[0] as NostrEvent) : null;
  }

  /** Every revision of `d` this key may read (`POST /query`, `artifact: "history"`). */
  async history(d: string): Promise<NostrEvent[]> {
    const found = await this.http.query({ artifact: "history", "#d": [uuid(d, "artifact id")], limit: HISTORY_LIMIT });
    if (!Array.isArray(found)) throw new BuzzError("protocol", "a history query answered something that is not a list");
    return found as NostrEvent[];
  }
}

/** The revision no other one names as `prev`: the head of a chain. */
function tip(revisions: NostrEvent[]): NostrEvent | undefined {
  const named = new Set(revisions.map((e) => first(e.tags, "prev")));
  const tips = revisions.filter((e) => !named.has(e.id));
  tips.sort((a, b) => b.created_at - a.created_at);
  return tips[0];
}

/** The shapes the package reads and hands to apps. */

/** A signed Nostr event (NIP-01), as the relay serves and stores it. */
export interface NostrEvent {
  id: string;
  pubkey: string;
  created_at: number;
  kind: number;
  tags: string[][];
  content: string;
  sig: string;
}

/** An event before signing. */
export interface EventTemplate {
  kind: number;
  created_at: number;
  tags: string[][];
  content: string;
}

/** One artifact of the local collection: its current head event and what is read from its tags. */
export interface ArtifactRow {
  d: string;
  eventId: string;
  kind: number;
  /** The head's home channel (`h`). */
  channel: string;
  type: string | null;
  op: string | null;
  title: string | null;
  content: string;
  author: string;
  /** The head event's `created_at`: when the artifact was last modified, by its author's clock. */
  createdAt: number;
  event: NostrEvent;
}

/** A query over the local collection; every given predicate must hold. */
export interface CollectionQuery {
  channel?: string | readonly string[];
  type?: string | readonly string[];
  /** Case-insensitive substring of the title. */
  titleContains?: string;
  /** `modified` (newest first, the default) or `title`. */
  orderBy?: "modified" | "title";
  limit?: number;
}

export function first(tags: readonly string[][], name: string): string | null {
  for (const tag of tags) {
    if (tag[0] === name && tag.length > 1) return tag[1];
  }
  return null;
}

export function rowOf(event: NostrEvent): ArtifactRow {
  return {
    d: first(event.tags, "d") ?? "",
    eventId: event.id,
    kind: event.kind,
    channel: first(event.tags, "h") ?? "",
    type: first(event.tags, "type"),
    op: first(event.tags, "op"),
    title: first(event.tags, "title"),
    content: event.content,
    author: event.pubkey,
    createdAt: event.created_at,
    event,
  };
}

const asList = (value: string | readonly string[] | undefined): readonly string[] | null =>
  value === undefined ? null : typeof value === "string" ? [value] : value;

/** Whether a row matches a query's predicates (the one definition every adapter's filter and
 * every subscription uses). */
export function matches(row: ArtifactRow, query: CollectionQuery): boolean {
  const channels = asList(query.channel);
  if (channels && !channels.includes(row.channel)) return false;
  const types = asList(query.type);
  if (types && !(row.type !== null && types.includes(row.type))) return false;
  if (query.titleContains) {
    const needle = query.titleContains.toLowerCase();
    if (!(row.title ?? "").toLowerCase().includes(needle)) return false;
  }
  return true;
}

/** Orders rows as `query.orderBy` says; ties by `d` so that every adapter agrees. */
export function compareRows(query: CollectionQuery): (a: ArtifactRow, b: ArtifactRow) => number {
  if (query.orderBy === "title") {
    return (a, b) => (a.title ?? "").localeCompare(b.title ?? "") || (a.d < b.d ? -1 : a.d > b.d ? 1 : 0);
  }
  return (a, b) => b.createdAt - a.createdAt || (a.d < b.d ? -1 : a.d > b.d ? 1 : 0);
}

/** Filters, orders and limits rows (adapters that cannot do it natively end here). */
export function runQuery(rows: Iterable<ArtifactRow>, query: CollectionQuery): ArtifactRow[] {
  const found: ArtifactRow[] = [];
  for (const row of rows) if (matches(row, query)) found.push(row);
  found.sort(compareRows(query));
  return query.limit !== undefined ? found.slice(0, query.limit) : found;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX64 = /^[0-9a-f]{64}$/;

export const isUuid = (value: unknown): value is string => typeof value === "string" && UUID.test(value);
export const isHex64 = (value: unknown): value is string => typeof value === "string" && HEX64.test(value);

export const KIND_ARTIFACT = 45010;
export const KIND_REMOVAL_MARKER = 45011;
export const KIND_PUT_MEMBER = 9000;
export const KIND_REMOVE_MEMBER = 9001;
export const KIND_EDIT_CHANNEL = 9002;
export const KIND_REDACTION = 9005;
export const KIND_CREATE_CHANNEL = 9007;
export const KIND_DELETE_CHANNEL = 9008;

/**
 * HTTP to one relay: NIP-11 discovery, `POST /query` and `POST /event` signed with NIP-98, and
 * the retry policy (429 `Retry-After`, 502/503/504 and network failures with backoff).
 *
 * The relay resolves the community from the host it is addressed by (PROTOCOL.md section 1), so
 * a relay URL names both the deployment and the community.
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";

import { backoff, defaultRetry, parseRetryAfter, type RetryPolicy, sleep as realSleep } from "./backoff.js";
import { BuzzError } from "./errors.js";
import type { Signer } from "./signer.js";
import type { NostrEvent } from "./types.js";

export const EXT_INCREMENTAL = "artifacts.incremental";
export const EXT_SYNC = "artifacts.sync";

export class RelayAddress {
  /** `http(s)://host[:port]`, default port dropped, no trailing slash. */
  readonly baseUrl: string;
  /** Lowercase host without port: the community this URL serves. */
  readonly host: string;

  private constructor(baseUrl: string, host: string) {
    this.baseUrl = baseUrl;
    this.host = host;
  }

  /** Accepts http(s) and ws(s) URLs with an empty or `/` path. */
  static parse(url: string): RelayAddress {
    let text = url.trim();
    text = text.replace(/^ws(s?):\/\//i, (_m, s: string) => `http${s}://`);
    let parsed: URL;
    try {
      parsed = new URL(text);
    } catch {
      throw new BuzzError("bad_input", `not a relay URL: ${url}`);
    }
    if (!["http:", "https:"].includes(parsed.protocol) || !["", "/"].includes(parsed.pathname) || parsed.search || parsed.hash) {
      throw new BuzzError("bad_input", "a relay URL names a scheme and host only, like http://127.0.0.1:8000");
    }
    return new RelayAddress(`${parsed.protocol}//${parsed.host}`, parsed.hostname.toLowerCase());
  }

  url(path: string): string {
    return this.baseUrl + (path.startsWith("/") ? path : "/" + path);
  }

  wsUrl(path = "/"): string {
    return this.url(path).replace(/^http/, "ws");
  }
}

/** What NIP-11 says about the community at this URL (PROTOCOL.md section 6). */
export interface RelayInfo {
  name: string | null;
  pubkey: string | null;
  incremental: boolean;
  queryEndpoint: string;
  maxLimit: number;
  /** The relay serves `view_changes: "incremental"`. */
  incrementalViewChanges: boolean;
  sync: boolean;
  syncEndpoint: string;
  document: Record<string, unknown>;
}

const obj = (value: unknown): Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
const pathOr = (value: unknown, fallback: string): string =>
  typeof value === "string" && value.startsWith("/") ? value : fallback;

export function parseRelayInfo(document: Record<string, unknown>): RelayInfo {
  const extensions = Array.isArray(document.supported_extensions) ? document.supported_extensions : [];
  const artifacts = obj(document.artifacts);
  const incremental = obj(artifacts.incremental);
  const sync = obj(artifacts.sync);
  const limitation = obj(document.limitation);
  let maxLimit = incremental.max_limit ?? limitation.max_limit ?? 1000;
  if (typeof maxLimit !== "number" || !Number.isInteger(maxLimit) || maxLimit < 1) maxLimit = 1000;
  const viewChanges = incremental.view_changes;
  return {
    name: typeof document.name === "string" && document.name.trim() ? document.name : null,
    pubkey: typeof document.pubkey === "string" ? document.pubkey : null,
    // Both places must say so: the extension list is what NIP-11 readers look at, the object
    // carries the endpoint.
    incremental: extensions.includes(EXT_INCREMENTAL) && Object.keys(incremental).length > 0,
    queryEndpoint: pathOr(incremental.endpoint, "/query"),
    maxLimit: maxLimit as number,
    incrementalViewChanges: Array.isArray(viewChanges) && viewChanges.includes("incremental"),
    sync: extensions.includes(EXT_SYNC),
    syncEndpoint: pathOr(sync.endpoint, "/"),
    document,
  };
}

export interface TransportStats {
  requests: number;
  rateLimited: number;
  busy: number;
  /** Seconds slept before retries. */
  waited: number;
  /** Every `Retry-After` value honoured, in seconds. */
  retryAfter: number[];
}

/** One HTTP answer, as much of it as `RelayHttp` reads. */
export interface HttpAnswer {
  readonly status: number;
  /** The URL asked (for messages). */
  readonly url: string;
  header(name: string): string | null;
  /** The whole body as text (UTF-8). */
  text(): Promise<string>;
  /** Drops the body unread. */
  discard(): Promise<void>;
}

export interface HttpRequest {
  method: string;
  headers: Record<string, string>;
  body: Uint8Array | null;
  /** The whole exchange, body included, ends with an error after this many milliseconds. */
  timeoutMs: number;
}

/** How a request goes out: `fetchTransport` (browsers, and any `fetch`), or in Node
 * `nodeTransport` (`node-http.ts`, node:http with a keep-alive agent). Only this differs; the
 * retries, status handling and parsing are `RelayHttp`'s, one definition for both. A request
 * that cannot reach the relay rejects with an error whose `cause` carries the system `code`
 * (as `fetch`'s TypeError does). */
export type HttpTransport = (url: string, request: HttpRequest) => Promise<HttpAnswer>;

export function fetchTransport(fetchImpl: typeof fetch): HttpTransport {
  return async (url, { method, headers, body, timeoutMs }) => {
    const response = await fetchImpl(url, {
      method,
      headers,
      body: (body ?? undefined) as BodyInit | undefined,
      signal: AbortSignal.timeout(timeoutMs),
    });
    return {
      status: response.status,
      url: response.url || url,
      header: (name) => response.headers.get(name),
      text: () => response.text(),
      discard: async () => void (await response.body?.cancel()),
    };
  };
}

export interface RelayHttpOptions {
  retry?: Partial<RetryPolicy>;
  /** A `fetch` of your own (tests, a proxy); ignored when `transport` is given. */
  fetch?: typeof fetch;
  /** Default: `fetch` through `fetchTransport`. */
  transport?: HttpTransport;
  sleep?: (seconds: number) => Promise<void>;
  /** Per-request timeout, seconds. */
  timeout?: number;
}

function toBase64(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

function randomHex(bytes: number): string {
  const buffer = new Uint8Array(bytes);
  crypto.getRandomValues(buffer);
  return bytesToHex(buffer);
}

/** NIP-98 `Authorization` header for one request. Built here rather than with nostr-tools'
 * `nip98.getToken` because PROTOCOL.md section 3 accepts each event id once: a `nonce` tag keeps
 * two identical requests within one second from sharing an id. */
export async function nip98Header(signer: Signer, url: string, method: string, body: Uint8Array | null): Promise<string> {
  const tags = [
    ["u", url],
    ["method", method],
    ["nonce", randomHex(8)],
  ];
  if (body !== null) tags.push(["payload", bytesToHex(sha256(body))]);
  const event = await signer.signEvent({ kind: 27235, created_at: Math.floor(Date.now() / 1000), tags, content: "" });
  return "Nostr " + toBase64(JSON.stringify(event));
}

const ANSWER_TEXT = Symbol("answer text");

/** The text a parsed answer was parsed from (`RelayHttp`'s answers only): a page's verify
 * worker is sent this one string, which it parses itself, rather than the page's parsed events
 * (a structured clone of every event object, ~7 ms of CPU a 1,000-event page on the two
 * threads together, against ~2.5 ms to copy and parse the text: docs/performance.md). */
export function answerText(body: unknown): string | undefined {
  return body !== null && typeof body === "object" ? (body as { [ANSWER_TEXT]?: string })[ANSWER_TEXT] : undefined;
}

/** The relay's `OK` answer to a published event. */
export interface OkAnswer {
  eventId: string;
  accepted: boolean;
  message: string;
}

export class RelayHttp {
  readonly address: RelayAddress;
  readonly stats: TransportStats = { requests: 0, rateLimited: 0, busy: 0, waited: 0, retryAfter: [] };
  private readonly signer: Signer;
  private readonly retry: RetryPolicy;
  private readonly transport: HttpTransport;
  private readonly sleep: (seconds: number) => Promise<void>;
  private readonly timeout: number;

  constructor(address: RelayAddress, signer: Signer, options: RelayHttpOptions = {}) {
    this.address = address;
    this.signer = signer;
    this.retry = { ...defaultRetry, ...options.retry };
    // globalThis.fetch is looked up per request, not here: in Node merely reading it loads
    // undici, which a client on nodeTransport never needs.
    this.transport = options.transport ?? fetchTransport(options.fetch ?? ((url, init) => globalThis.fetch(url, init)));
    this.sleep = options.sleep ?? realSleep;
    this.timeout = options.timeout ?? 30;
  }

  async relayInfo(): Promise<RelayInfo> {
    const body = await this.json(await this.send("GET", "/", null));
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new BuzzError("protocol", `${this.address.baseUrl}: NIP-11 document is not an object`);
    }
    return parseRelayInfo(body as Record<string, unknown>);
  }

  /** POST one filter; the parsed 200 body (the caller validates it). */
  async query(filter: Record<string, unknown>, endpoint = "/query"): Promise<unknown> {
    const body = new TextEncoder().encode(JSON.stringify([filter]));
    return this.json(await this.send("POST", endpoint, body));
  }

  /** `POST /event` (PROTOCOL.md section 4): the relay's `OK` triple. */
  async publish(event: NostrEvent): Promise<OkAnswer> {
    const body = new TextEncoder().encode(JSON.stringify(event));
    const answer = await this.json(await this.send("POST", "/event", body));
    if (!Array.isArray(answer) || answer.length !== 4 || answer[0] !== "OK" || typeof answer[2] !== "boolean" || typeof answer[3] !== "string") {
      throw new BuzzError("protocol", `${this.address.baseUrl}/event answered ${JSON.stringify(answer).slice(0, 200)}`);
    }
    return { eventId: String(answer[1]), accepted: answer[2], message: answer[3] };
  }

  private async json(response: HttpAnswer): Promise<unknown> {
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new BuzzError("protocol", `${response.url}: answer is not JSON (HTTP ${response.status})`);
    }
    if (parsed !== null && typeof parsed === "object") Object.defineProperty(parsed, ANSWER_TEXT, { value: text });
    return parsed;
  }

  private async wait(seconds: number): Promise<void> {
    this.stats.waited += seconds;
    await this.sleep(seconds);
  }

  async send(method: string, path: string, body: Uint8Array | null): Promise<HttpAnswer> {
    const url = this.address.url(path);
    let failures = 0;
    let rateLimited = 0;
    for (;;) {
      const headers: Record<string, string> = {
        Accept: method === "GET" ? "application/nostr+json" : "application/json",
      };
      if (body !== null) {
        headers["Content-Type"] = "application/json";
        // A fresh event per attempt: the relay accepts each NIP-98 event id once.
        headers.Authorization = await nip98Header(this.signer, url, method, body);
      }
      this.stats.requests += 1;
      let response: HttpAnswer;
      try {
        response = await this.transport(url, { method, headers, body, timeoutMs: this.timeout * 1000 });
      } catch (error) {
        failures += 1;
        if (failures >= this.retry.maxAttempts || (failures >= this.retry.connectAttempts && isRefused(error))) {
          throw new BuzzError("unreachable", `cannot reach relay ${this.address.baseUrl}: ${describe(error)}`);
        }
        this.stats.busy += 1;
        await this.wait(backoff(this.retry, failures));
        continue;
      }
      const status = response.status;
      if (status === 429) {
        rateLimited += 1;
        const header = response.header("Retry-After");
        let seconds = parseRetryAfter(header);
        await response.discard();
        if (rateLimited > this.retry.maxRateLimited || (seconds !== null && seconds > this.retry.cap)) {
          throw new BuzzError("busy", `relay ${this.address.baseUrl} keeps rate-limiting this key (Retry-After ${header})`, { status });
        }
        this.stats.rateLimited += 1;
        if (seconds === null) seconds = backoff(this.retry, rateLimited);
        else this.stats.retryAfter.push(seconds);
        await this.wait(seconds);
        continue;
      }
      if (status === 502 || status === 503 || status === 504) {
        failures += 1;
        const { code } = await errorFields(response);
        if (failures >= this.retry.maxAttempts) {
          throw new BuzzError("busy", `relay ${this.address.baseUrl} is busy or unavailable (HTTP ${status} ${code}) after ${failures} attempts`, { status, relayCode: code });
        }
        this.stats.busy += 1;
        const hinted = parseRetryAfter(response.header("Retry-After")) ?? 0;
        await this.wait(Math.max(Math.min(hinted, this.retry.cap), backoff(this.retry, failures)));
        continue;
      }
      if (status === 200) return response;
      const { code, message } = await errorFields(response);
      if (status === 401) {
        throw new BuzzError("unauthorized", `relay ${this.address.baseUrl} refused our key (401): ${message || code}`, { status, relayCode: code });
      }
      if (status === 404 && code === "unknown_community") {
        throw new BuzzError("unknown_community", `no community is served at ${this.address.host} on relay ${this.address.baseUrl} (404)`, { status, relayCode: code });
      }
      throw new BuzzError("rejected", `relay answered HTTP ${status} ${code}${message ? ": " + message : ""}`, { status, relayCode: code });
    }
  }
}

async function errorFields(response: HttpAnswer): Promise<{ code: string; message: string }> {
  const text = await response.text();
  try {
    const body = JSON.parse(text) as unknown;
    if (body && typeof body === "object" && !Array.isArray(body)) {
      const fields = body as Record<string, unknown>;
      return { code: String(fields.error ?? "error"), message: String(fields.message ?? "") };
    }
  } catch {
    // not JSON: said below
  }
  return { code: "non_json_error", message: text.slice(0, 200).trim() };
}

function isRefused(error: unknown): boolean {
  const cause = (error as { cause?: { code?: string } })?.cause;
  return cause?.code === "ECONNREFUSED" || cause?.code === "ENOTFOUND";
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code) return `${cause.code}${cause.message ? " " + cause.message : ""}`;
  return error instanceof Error ? error.message : String(error);
}

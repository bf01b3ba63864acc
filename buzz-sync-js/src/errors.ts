/**
 * Errors as typed values: every failure the client reports is a `BuzzError` with a `code` an
 * app can switch on, and the relay's own words in `message` (and `relayCode` for HTTP errors).
 */

export type BuzzErrorCode =
  | "unreachable" // the relay could not be reached (after the retry policy)
  | "unauthorized" // 401: the relay refused our key or NIP-98 event
  | "unknown_community" // 404 unknown_community: no community at this host
  | "busy" // 429 or 503 for longer than the retry policy allows
  | "rejected" // any other HTTP error answer (status, relayCode)
  | "protocol" // an answer outside PROTOCOL.md: nothing of it was applied
  | "concurrent_sync" // another tab or process applied a page of this collection first
  | "not_found" // publishing: neither the collection nor the relay knows the artifact
  | "bad_input"; // a value of the app's is not acceptable (a channel that is no UUID, ...)

export class BuzzError extends Error {
  readonly code: BuzzErrorCode;
  /** HTTP status of the relay's answer, when there was one. */
  readonly status?: number;
  /** The relay's JSON `error` code (`invalid_filter`, `invalid_progress`, ...). */
  readonly relayCode?: string;

  constructor(code: BuzzErrorCode, message: string, extra: { status?: number; relayCode?: string } = {}) {
    super(message);
    this.name = "BuzzError";
    this.code = code;
    this.status = extra.status;
    this.relayCode = extra.relayCode;
  }
}

/** When to retry and how long to wait: the same policy as buzzclient/backoff.py. */

export interface RetryPolicy {
  /** First wait after a 503 or a network failure, seconds; doubled per further attempt. */
  base: number;
  /** Longest wait; also the longest 429 `Retry-After` honoured before giving up. */
  cap: number;
  /** Consecutive 503s / network failures before giving up on one request. */
  maxAttempts: number;
  /** Refused connections give up sooner (a wrong URL, a relay that is down). */
  connectAttempts: number;
  /** Consecutive 429s honoured for one request. */
  maxRateLimited: number;
  random: () => number;
}

export const defaultRetry: RetryPolicy = {
  base: 0.5,
  cap: 30,
  maxAttempts: 8,
  connectAttempts: 3,
  maxRateLimited: 30,
  random: Math.random,
};

/** Capped exponential with "equal jitter": half fixed, half random, never zero. */
export function backoff(policy: RetryPolicy, attempt: number): number {
  const ceiling = Math.min(policy.cap, policy.base * 2 ** (attempt - 1));
  return ceiling / 2 + (policy.random() * ceiling) / 2;
}

/** Seconds from a `Retry-After` header (delay-seconds or an HTTP date), or null. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (text === "") return null;
  const seconds = Number(text);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - now) / 1000);
}

export const sleep = (seconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, seconds * 1000));

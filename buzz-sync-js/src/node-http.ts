/**
 * Node: requests through node:http / node:https with a keep-alive agent, in place of `fetch`
 * (undici). Reading a 1,000-event page's answer costs ~4 ms of CPU here against 7.5-11 ms
 * through `fetch` and `response.text()` (docs/performance.md), and the first request does not
 * load undici. `BuzzClient.open` uses it in Node unless given a `fetch` of its own. Only the
 * exchange is here: retries, statuses and parsing stay `RelayHttp`'s. Node-only: imported
 * from `buzz-sync-js/node`, never from the package's browser entry.
 */

import http from "node:http";
import https from "node:https";

import type { HttpAnswer, HttpTransport } from "./relay.js";

/** A transport on its own keep-alive agents (one connection per request in flight, kept open
 * between pages, as `fetch` keeps its own). */
export function nodeTransport(): HttpTransport {
  // Sockets idle between rounds are not kept longer than the relay would keep them anyway,
  // and never hold the process open.
  const agents = {
    "http:": new http.Agent({ keepAlive: true, timeout: 60_000 }),
    "https:": new https.Agent({ keepAlive: true, timeout: 60_000 }),
  };
  return (url, { method, headers, body, timeoutMs }) =>
    new Promise<HttpAnswer>((resolve, reject) => {
      const target = new URL(url);
      const agent = target.protocol === "https:" ? agents["https:"] : agents["http:"];
      const send = target.protocol === "https:" ? https.request : http.request;
      const sent: Record<string, string> = { ...headers };
      if (body !== null) sent["Content-Length"] = String(body.byteLength);
      // One deadline for the whole exchange, body included, as `AbortSignal.timeout` is for fetch.
      const timer = setTimeout(() => request.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: "ETIMEDOUT" })), timeoutMs);
      const request = send(target, { method, headers: sent, agent }, (response) => {
        const ended = new Promise<Buffer>((done, failed) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => {
            clearTimeout(timer);
            done(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks));
          });
          response.on("error", (error) => {
            clearTimeout(timer);
            failed(new Error("the answer broke off", { cause: error }));
          });
          response.on("aborted", () => {
            clearTimeout(timer); // else the deadline's timer would hold Node open until it fires
            failed(new Error("the answer broke off", { cause: { code: "ECONNRESET" } }));
          });
        });
        ended.catch(() => undefined); // surfaces through text(); never an unhandled rejection
        resolve({
          status: response.statusCode ?? 0,
          url,
          header: (name) => {
            const value = response.headers[name.toLowerCase()];
            return value === undefined ? null : Array.isArray(value) ? value.join(", ") : value;
          },
          text: async () => (await ended).toString("utf8"),
          discard: async () => {
            await ended.catch(() => undefined); // read to the end: the connection is then reused
          },
        });
      });
      request.on("error", (error) => {
        clearTimeout(timer);
        // fetch's shape: the system error (ECONNREFUSED, ...) as the cause.
        reject(new TypeError("request failed", { cause: error }));
      });
      request.end(body ?? undefined);
    });
}

// The Node transport (node:http with a keep-alive agent, src/node-http.ts) against a scripted
// local server: RelayHttp's one policy (retries, Retry-After, errors, parsing) answers the same
// through it as through fetch, a page's text arrives whole whatever its chunks, connections are
// reused, and a relay that is down or silent ends as it does with fetch.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { BuzzClient, MemoryStore, RelayAddress, RelayHttp, fetchTransport, keySigner, generateSecretHex } from "../dist/index.js";
import { nodeTransport } from "../dist/node-verify.js";

const SECRET = generateSecretHex();

/** A server answering each request with the next of `script` (a function of the request and
 * its body); counts connections. */
async function serve(script) {
  const seen = { connections: 0, requests: [] };
  const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      seen.requests.push({ method: request.method, url: request.url, headers: request.headers, body });
      const answer = script.shift();
      if (answer) answer(response, body);
    });
  });
  server.on("connection", () => (seen.connections += 1));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return { url: `http://127.0.0.1:${port}`, seen, close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }) };
}

const reply = (status, body, headers = {}) => (response) => {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  response.writeHead(status, { "Content-Type": "application/json", ...headers });
  response.end(text);
};

const transports = [["fetch", () => fetchTransport((url, init) => fetch(url, init))], ["node:http", () => nodeTransport()]];

for (const [name, transport] of transports) {
  test(`${name}: 429 waits Retry-After, 503 backs off, then the page; the request is signed and whole`, async () => {
    const page = { events: [], removed: [], progress: "p1", more: false, reset: true, note: "snow ☃ and 𝄞" };
    const relay = await serve([
      reply(429, { error: "rate_limited" }, { "Retry-After": "3" }),
      reply(503, { error: "budget_exceeded" }),
      reply(200, page),
    ]);
    try {
      const waits = [];
      const http = new RelayHttp(RelayAddress.parse(relay.url), keySigner(SECRET), {
        transport: transport(), retry: { random: () => 0 }, sleep: async (s) => void waits.push(s),
      });
      const filter = { artifact: "current", limit: 1000, progress: null, "#type": ["buzz.tâsk"] };
      assert.deepEqual(await http.query(filter), page);
      assert.deepEqual(waits, [3, 0.25]); // Retry-After, then equal jitter's lower half of 0.5
      assert.equal(http.stats.requests, 3);
      assert.deepEqual(http.stats.retryAfter, [3]);
      for (const request of relay.seen.requests) {
        assert.equal(request.method, "POST");
        assert.deepEqual(JSON.parse(request.body), [filter]);
        assert.equal(Number(request.headers["content-length"]), Buffer.byteLength(request.body));
        assert.match(request.headers.authorization, /^Nostr /);
      }
    } finally {
      await relay.close();
    }
  });

  test(`${name}: an error answer is the relay's code; a non-JSON answer is a protocol error`, async () => {
    const relay = await serve([reply(400, { error: "invalid_progress", message: "no" }), reply(200, "<html>")]);
    try {
      const http = new RelayHttp(RelayAddress.parse(relay.url), keySigner(SECRET), { transport: transport() });
      await assert.rejects(http.query({ artifact: "current" }), (e) => e.code === "rejected" && e.status === 400 && e.relayCode === "invalid_progress");
      await assert.rejects(http.query({ artifact: "current" }), (e) => e.code === "protocol" && /not JSON \(HTTP 200\)/.test(e.message));
    } finally {
      await relay.close();
    }
  });

  test(`${name}: a relay that is down is unreachable; one that never answers times out and is retried`, async () => {
    const down = await serve([]);
    await down.close();
    const refused = new RelayHttp(RelayAddress.parse(down.url), keySigner(SECRET), {
      transport: transport(), retry: { connectAttempts: 1 }, sleep: async () => {},
    });
    await assert.rejects(refused.query({ artifact: "current" }), (e) => e.code === "unreachable" && /ECONNREFUSED/.test(e.message));
    const silent = await serve([() => {}, () => {}]);
    try {
      const waits = [];
      const http = new RelayHttp(RelayAddress.parse(silent.url), keySigner(SECRET), {
        transport: transport(), timeout: 0.2, retry: { maxAttempts: 2, random: () => 0 }, sleep: async (s) => void waits.push(s),
      });
      await assert.rejects(http.query({ artifact: "current" }), (e) => e.code === "unreachable");
      assert.equal(silent.seen.requests.length, 2);
      assert.equal(waits.length, 1);
    } finally {
      await silent.close();
    }
  });
}

test("node:http: a page in many chunks (a character split between them) arrives whole, on one kept-alive connection", async () => {
  const text = JSON.stringify({ events: [], removed: [], progress: "é".repeat(50_000) + "𝄞", more: false, reset: false });
  const bytes = Buffer.from(text, "utf8");
  const chunked = (response) => {
    response.writeHead(200, { "Content-Type": "application/json" });
    // Odd-sized writes: multi-byte characters straddle them.
    for (let at = 0; at < bytes.length; at += 4097) response.write(bytes.subarray(at, at + 4097));
    response.end();
  };
  const relay = await serve([chunked, chunked, chunked]);
  try {
    const http = new RelayHttp(RelayAddress.parse(relay.url), keySigner(SECRET), { transport: nodeTransport() });
    for (let i = 0; i < 3; i += 1) assert.equal((await http.query({ artifact: "current" })).progress, "é".repeat(50_000) + "𝄞");
    assert.equal(relay.seen.connections, 1);
  } finally {
    await relay.close();
  }
});

test("BuzzClient in Node asks the relay through node:http unless given a fetch", async () => {
  const info = { supported_extensions: [] };
  const relay = await serve([reply(200, info), reply(200, info)]);
  try {
    const own = [];
    const plain = await BuzzClient.open({ relay: relay.url, store: new MemoryStore(), secretKey: SECRET, useNip07: false, live: false });
    const withFetch = await BuzzClient.open({
      relay: relay.url, store: new MemoryStore(), secretKey: SECRET, useNip07: false, live: false,
      fetch: (url, init) => (own.push(url), fetch(url, init)),
    });
    await plain.http.relayInfo();
    await withFetch.http.relayInfo();
    assert.deepEqual(own, [relay.url + "/"]);
    // fetch (undici) names itself in User-Agent; node:http sends none.
    assert.equal(relay.seen.requests[0].headers["user-agent"], undefined);
    assert.equal(relay.seen.requests[1].headers["user-agent"], "node");
    await plain.close();
    await withFetch.close();
  } finally {
    await relay.close();
  }
});

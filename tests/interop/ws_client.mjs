// An independent Nostr client against the relay's sync WebSocket: nostr-tools' Relay connects,
// sees a REQ refused before NIP-42, authenticates (relay.auth with finalizeEvent), subscribes,
// collects the replay up to EOSE, publishes an artifact revision and waits for it to come back
// live. Prints one JSON object with what happened. Used by tests/artifacts/ws/test_nostr_tools.py.
//
//   node ws_client.mjs <relay ws url> <secret key hex> <channel uuid> <new artifact uuid>
//
// Node < 22 needs --experimental-websocket (nostr-tools uses the global WebSocket).
import { finalizeEvent } from "nostr-tools/pure";
import { Relay } from "nostr-tools/relay";
import { hexToBytes } from "nostr-tools/utils";

const [url, secretHex, channel, newArtifact] = process.argv.slice(2);
const secret = hexToBytes(secretHex);
const TIMEOUT_MS = 8000;

function within(promise, what) {
  return Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), TIMEOUT_MS)),
  ]);
}

async function waitFor(condition, what) {
  const deadline = Date.now() + TIMEOUT_MS;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const result = {};
const relay = await within(Relay.connect(url), "connect");
await waitFor(() => relay.challenge, "AUTH challenge");
result.challenge = relay.challenge;

result.beforeAuth = await within(
  new Promise((resolve) => {
    relay.subscribe([{ kinds: [45010], "#h": [channel] }], {
      onclose: (reason) => resolve(reason),
      oneose: () => resolve("EOSE"),
    });
  }),
  "refusal before AUTH",
);

result.auth = await within(relay.auth(async (template) => finalizeEvent(template, secret)), "AUTH");

result.replayed = [];
let eosed = false;
let onLive;
const live = new Promise((resolve) => (onLive = resolve));
await within(
  new Promise((resolve, reject) => {
    relay.subscribe([{ kinds: [45010, 45011], "#h": [channel] }], {
      onevent(event) {
        if (eosed) onLive(event);
        else result.replayed.push(event.id);
      },
      oneose() {
        eosed = true;
        resolve();
      },
      onclose: (reason) => reject(new Error(`subscription closed: ${reason}`)),
    });
  }),
  "EOSE",
);

const event = finalizeEvent(
  {
    kind: 45010,
    created_at: Math.floor(Date.now() / 1000),
    tags: [
      ["ar", "1"],
      ["d", newArtifact],
      ["h", channel],
      ["type", "buzz.task"],
      ["op", "create"],
      ["title", "written by nostr-tools"],
    ],
    content: '{"from":"nostr-tools"}',
  },
  secret,
);
result.published = event.id;
result.publishReason = await within(relay.publish(event), "OK");
result.live = (await within(live, "live event")).id;
relay.close();
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(0);

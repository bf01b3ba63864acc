// Reads one JSON event per line on stdin and answers one JSON line per event with what
// nostr-tools makes of it: {"id": getEventHash(event), "valid": verifyEvent(event)}.
// A line that nostr-tools cannot hash answers {"error": "..."}. Used by
// tests/nostr/test_interop.py to check nostr/events.py against the reference client library.
import { createInterface } from "node:readline";
import { getEventHash, verifyEvent } from "nostr-tools/pure";

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    const event = JSON.parse(line);
    answer = { id: getEventHash(event), valid: verifyEvent(event) };
  } catch (err) {
    answer = { error: String(err) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}

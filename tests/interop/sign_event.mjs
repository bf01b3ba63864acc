// Reads one JSON request per line on stdin, {"sk": "<hex secret>", "template": {"kind",
// "tags", "content", "created_at"}}, and answers the event nostr-tools' finalizeEvent signs,
// one JSON line each (or {"error": "..."}). Used by tests/nostr/test_interop.py.
import { createInterface } from "node:readline";
import { finalizeEvent } from "nostr-tools/pure";
import { hexToBytes } from "nostr-tools/utils";

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    const { sk, template } = JSON.parse(line);
    answer = finalizeEvent(template, hexToBytes(sk));
  } catch (err) {
    answer = { error: String(err) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}

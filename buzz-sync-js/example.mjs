// The README's example (Node): node --experimental-websocket example.mjs http://127.0.0.1:8000
import { BuzzClient, generateSecretHex } from "./dist/index.js";
import { SqliteStore } from "./dist/sqlite.js";

const relay = process.argv[2] ?? "http://127.0.0.1:8000";
const client = await BuzzClient.open({ relay, store: new SqliteStore("local.sqlite"), secretKey: process.env.BUZZ_KEY ?? generateSecretHex() });
console.log("reader", client.pubkey);
const [summary] = await client.syncNow();
console.log(`${summary.kind} round: +${summary.added} ~${summary.updated} -${summary.removed}`);
for (const row of await client.query({ type: "buzz.task", orderBy: "modified", limit: 10 })) {
  console.log(row.channel.slice(0, 8), row.title, row.content);
}
client.subscribe({ type: "buzz.task" }, ({ added, updated, removed }) => console.log("changed:", added.length, updated.length, removed.length));
client.start();
setTimeout(() => client.close(), Number(process.env.BUZZ_EXAMPLE_SECONDS ?? 30) * 1000);

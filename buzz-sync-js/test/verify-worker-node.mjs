// dist/verify-worker.js (a Web Worker's script) in a Node worker thread, for the unit tests:
// the same globals a browser worker has (onmessage, postMessage), from the thread's port.
// (`node --test test/` also loads this file on the main thread: there it does nothing.)
import { isMainThread, parentPort } from "node:worker_threads";

if (!isMainThread) {
  globalThis.postMessage = (message) => parentPort.postMessage(message);
  await import("../dist/verify-worker.js");
  parentPort.on("message", (data) => globalThis.onmessage({ data }));
}

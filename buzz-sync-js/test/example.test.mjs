// The README's runnable example runs against the relay (it cannot drift from the API).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { against, RELAY } from "./helpers.mjs";

test("the README's example syncs and watches", against, async () => {
  const example = fileURLToPath(new URL("../example.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [...process.execArgv, example, RELAY], {
    cwd: mkdtempSync("/tmp/buzz-sync-js-example-"),
    env: { ...process.env, BUZZ_EXAMPLE_SECONDS: "1" },
    timeout: 60_000,
  });
  assert.match(stdout, /^reader [0-9a-f]{64}$/m);
  assert.match(stdout, /^full round: \+\d+ ~0 -0$/m);
});

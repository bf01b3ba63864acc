// Builds the /app/ page's assets from this folder into buzzrelay/static/buzz-app/ (committed:
// the quickstart needs no Node; tests/buzz_sync_js/test_app_assets.py rebuilds and compares).
//   node app/build.mjs            write the assets
//   node app/build.mjs --check    exit 1 if the committed assets differ from a fresh build
//   node app/build.mjs --library  the package as one browser ES module, dist/buzz-sync.browser.js
//                                 (for a page without a bundler; part of `npm run build`)
import { build } from "esbuild";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
if (process.argv.includes("--library")) {
  await build({
    entryPoints: [join(here, "..", "src", "index.ts")],
    outfile: join(here, "..", "dist", "buzz-sync.browser.js"),
    bundle: true, format: "esm", platform: "browser", target: ["es2022"], minify: true, legalComments: "none", logLevel: "warning",
  });
  console.log("wrote dist/buzz-sync.browser.js");
  process.exit(0);
}
const out = join(here, "..", "..", "buzzrelay", "static", "buzz-app");
const result = await build({
  // verify-worker: the page's signature checks off its thread (src/verify-worker.ts).
  entryPoints: [join(here, "board.ts"), join(here, "..", "src", "verify-worker.ts")],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2022", "chrome109", "firefox115", "safari16"],
  minify: true,
  legalComments: "none",
  // The signature checker (libsecp256k1 as WebAssembly, ~78 KB as base64) is imported dynamically: a chunk of its
  // own, named by its content, fetched while the page paints rather than parsed before it.
  splitting: true,
  outdir: out,
  entryNames: "[name]",
  chunkNames: "chunk-[hash]",
  write: false,
  logLevel: "warning",
});
const files = Object.fromEntries(result.outputFiles.map((file) => [basename(file.path), file.text]));
files["board.css"] = readFileSync(join(here, "board.css"), "utf8");
const built = (name) => name === "board.js" || name === "verify-worker.js" || /^chunk-[A-Z0-9]+\.js$/.test(name);
if (process.argv.includes("--check")) {
  const stale = Object.entries(files).filter(([name, text]) => {
    try {
      return readFileSync(join(out, name), "utf8") !== text;
    } catch {
      return true;
    }
  });
  for (const name of readdirSync(out)) if (built(name) && !(name in files)) stale.push([name, ""]);
  if (stale.length) {
    console.error(`stale: ${stale.map(([n]) => n).join(", ")}; run: cd buzz-sync-js && npm run build:app`);
    process.exit(1);
  }
  console.log("buzzrelay/static/buzz-app matches buzz-sync-js/app");
} else {
  for (const name of readdirSync(out)) if (built(name) && !(name in files)) rmSync(join(out, name));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(out, name), text);
  console.log(`wrote ${Object.keys(files).join(", ")} (${files["board.js"].length} bytes of script)`);
}

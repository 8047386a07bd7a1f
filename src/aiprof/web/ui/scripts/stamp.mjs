// After `vite build` (which writes app.js and the minified style.css): record the hash of the sources the bundle
// was built from in ../static/ui-build.json. tests/test_ui_bundle.py computes the same
// hash (sources_hash below) and fails when it differs: a bundle older than its source.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const INPUTS = ["src", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];

function walk(p, out) {
  const st = statSync(p);
  if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n), out);
  else if (!p.endsWith(".test.ts")) out.push(p);
  return out;
}

export function sourcesHash() {
  const files = INPUTS.flatMap((i) => walk(join(root, i), [])).map((f) => relative(root, f).split(sep).join("/"));
  files.sort();
  const h = createHash("sha256");
  for (const f of files) {
    h.update(f + "\0");
    h.update(readFileSync(join(root, f)));
    h.update("\0");
  }
  return { hash: h.digest("hex"), files: files.length };
}

const { hash, files } = sourcesHash();
writeFileSync(join(root, "../static/ui-build.json"), JSON.stringify({ sources_sha256: hash, files }, null, 1) + "\n");
console.log(`stamped ../static/ui-build.json: ${files} source files, sha256 ${hash.slice(0, 12)}`);

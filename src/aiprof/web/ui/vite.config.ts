// The UI is one classic script, static/app.js, so that the one-file HTML report can
// inline it; `npm run build` writes it and stamps static/ui-build.json with the hash of
// the sources (tests/test_ui_bundle.py fails when the bundle is older than them).
import { defineConfig } from "vitest/config";

export default defineConfig({
  build: {
    outDir: "../static",
    emptyOutDir: false,
    target: "es2020",
    sourcemap: false,
    minify: true,
    lib: {
      entry: "src/main.ts",
      name: "aiprof",
      formats: ["iife"],
      fileName: () => "app.js",
      // src/style.css, imported by main.ts, minified into static/style.css.
      cssFileName: "style",
    },
  },
  test: { environment: "node", include: ["src/**/*.test.ts"] },
});

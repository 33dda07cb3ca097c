// Builds ui/ into ui/dist, which crates/gatehouse-server embeds at compile time.
// No inline scripts or styles (the server's CSP forbids them), no CDN, no eval.
import { defineConfig } from "vite";

export default defineConfig({
  root: "ui",
  base: "/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: "es2022",
  },
  test: {
    root: ".",
    include: ["ui/test/**/*.test.ts"],
    environment: "node",
  },
} as import("vite").UserConfig);

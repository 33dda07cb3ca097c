// Shared by the two browser suites (run.mjs: a seeded control plane;
// live.mjs: the real `gatehouse up` with real wrapped servers): real
// headless Debian Chromium through playwright-core, steps with pass/fail
// counts, the `need:<what>` line protocol with the Rust side (one reply line
// on stdin), navigation, screenshots, axe-core and keyboard helpers.
//
// Env: GATEHOUSE_URL (one-time sign-in URL), SCREENSHOT_DIR,
// CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

const require = createRequire(import.meta.url);
const AXE = fs.readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export const URL0 = process.env.GATEHOUSE_URL;
export const SHOTS = process.env.SCREENSHOT_DIR ?? "artifacts/screenshots";
export const origin = new URL(URL0).origin;

export const log = (...a) => process.stderr.write(a.join(" ") + "\n");

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

/**
 * Starts Chromium on a fresh profile (`profile` names its temp dir). With
 * `stopAtFirstFailure` (later steps build on earlier ones) a failing step
 * also saves a `failure` screenshot and the remaining steps are skipped.
 */
export async function openHarness({ profile, stopAtFirstFailure }) {
  let passed = 0;
  let failed = 0;

  const rl = readline.createInterface({ input: process.stdin });
  const replies = [];
  let waiter = null;
  rl.on("line", (l) => {
    if (waiter) {
      const w = waiter;
      waiter = null;
      w(l);
    } else replies.push(l);
  });

  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), profile));
  // Playwright passes the temp profile as --user-data-dir itself.
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 900 },
    colorScheme: "light",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  fs.mkdirSync(SHOTS, { recursive: true });

  const dialogs = [];
  const cspViolations = [];
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });
  page.on("console", (m) => {
    if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
  });
  page.on("pageerror", (e) => log("page error:", e.message));

  async function shot(name) {
    await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  }

  async function step(name, fn) {
    if (stopAtFirstFailure && failed) return;
    const t = Date.now();
    try {
      await fn();
      passed++;
      log(`ok   ${name} (${Date.now() - t} ms)`);
    } catch (e) {
      failed++;
      log(`FAIL ${name}: ${e?.stack ?? e}`);
      if (stopAtFirstFailure) await shot("failure").catch(() => {});
    }
  }

  /** Writes `need:<what>` for the Rust side; resolves to its reply line. */
  function ask(what) {
    process.stdout.write(`need:${what}\n`);
    return new Promise((resolve) => {
      if (replies.length) resolve(replies.shift());
      else waiter = resolve;
    });
  }

  async function nav(label) {
    await page.getByRole("link", { name: label, exact: true }).click();
    await page.getByRole("heading", { level: 1, name: label }).waitFor();
  }

  async function axe(label) {
    await page.evaluate(AXE); // via DevTools protocol: not subject to the page's CSP
    const result = await page.evaluate(async () => {
      // eslint-disable-next-line no-undef
      const r = await axe.run(document, { resultTypes: ["violations"] });
      return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length, target: v.nodes[0]?.target?.join(" ") }));
    });
    const serious = result.filter((v) => v.impact === "serious" || v.impact === "critical");
    assert(serious.length === 0, `axe (${label}): ${JSON.stringify(serious)}`);
  }

  async function tabUntil(selector, max = 80) {
    await page.locator("#main").focus();
    for (let i = 0; i < max; i++) {
      await page.keyboard.press("Tab");
      const hit = await page.evaluate((sel) => document.activeElement?.matches(sel) ?? false, selector);
      if (hit) return i + 1;
    }
    throw new Error(`Tab never reached ${selector}`);
  }

  /** The last step of both suites: no CSP violation, a strict CSP header. */
  async function cspHeldStep() {
    await step("CSP held: no violations reported by our own pages", async () => {
      assert(cspViolations.length === 0, "CSP violations: " + cspViolations.join(" | "));
      const csp = (await page.request.get(origin + "/overview")).headers()["content-security-policy"];
      assert(csp && csp.includes("script-src 'self'") && csp.includes("frame-ancestors 'none'"), "strict CSP header present");
    });
  }

  /** Closes the browser, prints the tally and exits (1 on any failure). */
  async function finish() {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
    rl.close();
    log(`${passed} passed, ${failed} failed`);
    process.stdout.write(`${passed} passed, ${failed} failed\n`);
    process.exit(failed ? 1 : 0);
  }

  return { context, page, dialogs, step, ask, nav, shot, axe, tabUntil, cspHeldStep, finish };
}

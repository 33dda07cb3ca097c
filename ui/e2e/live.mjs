// Browser end-to-end against the real thing, driven from
// tests/e2e/dashboard.rs: a real `gatehouse up` (the built binary) and real
// `gatehouse wrap` processes around a FastMCP server, each driven by the
// Python MCP client. This script asks the Rust side to act on the servers
// by writing `need:<what>` lines on stdout; the answer is one line on stdin,
// `ok` or `fail: <why>`. Real headless Debian Chromium via playwright-core.
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
const URL0 = process.env.GATEHOUSE_URL;
const SHOTS = process.env.SCREENSHOT_DIR ?? "artifacts/screenshots";
const origin = new URL(URL0).origin;

let passed = 0;
let failed = 0;
const log = (...a) => process.stderr.write(a.join(" ") + "\n");

// Later steps build on earlier ones: stop at the first failure.
async function step(name, fn) {
  if (failed) return;
  const t = Date.now();
  try {
    await fn();
    passed++;
    log(`ok   ${name} (${Date.now() - t} ms)`);
  } catch (e) {
    failed++;
    log(`FAIL ${name}: ${e?.stack ?? e}`);
    await shot("failure").catch(() => {});
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

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
/** Asks the Rust side to do `what` to the real servers; throws on `fail:`. */
async function rust(what) {
  process.stdout.write(`need:${what}\n`);
  const reply = await new Promise((resolve) => {
    if (replies.length) resolve(replies.shift());
    else waiter = resolve;
  });
  assert(reply === "ok", `${what}: ${reply}`);
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gatehouse-live-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  colorScheme: "light",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
fs.mkdirSync(SHOTS, { recursive: true });

const cspViolations = [];
const page = context.pages()[0] ?? (await context.newPage());
page.on("dialog", (d) => d.dismiss());
page.on("console", (m) => {
  if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
});
page.on("pageerror", (e) => log("page error:", e.message));

async function nav(label) {
  await page.getByRole("link", { name: label, exact: true }).click();
  await page.getByRole("heading", { level: 1, name: label }).waitFor();
}

async function shot(name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
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
    if (await page.evaluate((sel) => document.activeElement?.matches(sel) ?? false, selector)) return i + 1;
  }
  throw new Error(`Tab never reached ${selector}`);
}

/** Opens the inbox until a card with `text` is there (the wrap posts it). */
async function inboxCard(text) {
  const card = page.locator("article.consent", { hasText: text });
  const until = Date.now() + 15_000;
  for (;;) {
    await nav("Consent inbox");
    if (await card.count()) return card;
    assert(Date.now() < until, `no inbox card with ${JSON.stringify(text)} within 15 s`);
    await page.waitForTimeout(300);
  }
}

await step("sign in; the link's next= route opens the events page", async () => {
  await page.goto(URL0 + "&next=" + encodeURIComponent("/events?since=24h"));
  await page.getByRole("heading", { level: 1, name: "Events" }).waitFor();
  const url = new URL(page.url());
  assert(url.pathname === "/events" && url.search === "?since=24h" && url.hash === "", `landed on ${page.url()}`);
  await shot("live-signin-next");
});

await step("a rug pull through gatehouse wrap appears live", async () => {
  await page.getByText("connected", { exact: true }).waitFor({ timeout: 10_000 });
  const before = await page.locator("#events-table tbody tr", { hasText: "mcp_tool_changed" }).count();
  assert(before === 0, "no change recorded before the rug pull");
  await rust("rugpull");
  await page.locator("#events-table tbody tr", { hasText: "mcp_tool_changed" }).first().waitFor({ timeout: 15_000 });
  await shot("live-events");
});

await step("approve the rug-pulled tool in the diff view; the next call through wrap passes", async () => {
  await nav("Tools & pins");
  await page.getByRole("button", { name: /Review add on rug/ }).click();
  await page.locator(".diff-table").waitFor();
  const changed = await page.locator(".diff-table tr[data-kind=add], .diff-table tr[data-kind=change]").allTextContents();
  assert(changed.some((t) => t.includes("sends them to")), `the diff shows the new description: ${changed.join(" | ")}`);
  const approve = "button[data-action=approve]";
  const steps = await tabUntil(approve);
  await tabUntil("button[data-action=reject]");
  log(`     Tab reached approve in ${steps} presses`);
  await shot("live-tools-diff");
  await axe("diff view light");
  await page.locator(approve).click();
  await page.locator("#tool-detail p.ok", { hasText: /^Approved add/ }).waitFor();
  await rust("call-add");
});

await step("an input request from a server is answered in the inbox; the server receives it", async () => {
  await rust("ask-city");
  const city = await inboxCard("Which city should I use?");
  const who = await city.locator(".who").textContent();
  assert(/^Server asker \(.*fastmcp_server\.py.*\) via mcp asks:$/.test(who.trim()), `names server, command and client: ${who}`);
  await tabUntil("article.consent button[data-action=accept]");
  await tabUntil("article.consent button[data-action=decline]");
  await shot("live-consent");
  await axe("inbox light");
  await city.getByLabel(/City/).fill("Bergen");
  await city.getByRole("button", { name: "Send answer" }).click();
  await city.waitFor({ state: "detached" });
  await rust("city-answered");
});

await step("a sensitive-field request can only be declined, and is", async () => {
  await rust("ask-token");
  const token = await inboxCard("Paste your API token");
  assert(await token.locator("[data-decline-only]").isVisible(), "explains why it can only be declined");
  assert((await token.locator("input").count()) === 0, "no input is offered for a secret");
  await shot("live-consent-sensitive");
  await token.getByRole("button", { name: "Decline" }).click();
  await token.waitFor({ state: "detached" });
  await rust("token-declined");
});

await step("a restricted server's request is declined (seen live)", async () => {
  await nav("Events");
  await page.getByText("connected", { exact: true }).waitFor({ timeout: 10_000 });
  await rust("restricted");
  const row = page.locator("#events-table tbody tr", { hasText: "mcp_elicitation_declined" }).filter({ hasText: "locked" });
  await row.first().waitFor({ timeout: 15_000 });
  await row.first().getByRole("button").click();
  const detail = await page.locator(".detail").first().textContent();
  assert(detail.includes("restricted.elicitation"), `names the rule: ${detail}`);
  await shot("live-events-restricted");
});

const pages = ["Overview", "Events", "Tools & pins", "Consent inbox", "Clients", "Secrets", "Policy", "Sessions"];
for (const theme of ["light", "dark"]) {
  await step(`axe-core: no serious findings on any page, ${theme} theme (screenshots)`, async () => {
    if ((await page.evaluate(() => document.documentElement.dataset.theme)) !== theme) {
      await page.getByRole("button", { name: new RegExp(`Switch to ${theme} theme`) }).click();
    }
    assert((await page.evaluate(() => document.documentElement.dataset.theme)) === theme, `${theme} theme applied`);
    for (const p of pages) {
      await nav(p);
      await axe(`${p} ${theme}`);
      await shot("live-" + p.toLowerCase().replace(/[^a-z]+/g, "-") + "-" + theme);
    }
  });
}

await step("CSP held: no violations reported by our own pages", async () => {
  assert(cspViolations.length === 0, "CSP violations: " + cspViolations.join(" | "));
  const csp = (await page.request.get(origin + "/overview")).headers()["content-security-policy"];
  assert(csp && csp.includes("script-src 'self'") && csp.includes("frame-ancestors 'none'"), "strict CSP header present");
});

await context.close();
fs.rmSync(userDataDir, { recursive: true, force: true });
rl.close();
log(`${passed} passed, ${failed} failed`);
process.stdout.write(`${passed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);

// Browser end-to-end against the real thing, driven from
// tests/e2e/dashboard.rs: a real `gatehouse up` (the built binary) and real
// `gatehouse wrap` processes around a FastMCP server, each driven by the
// Python MCP client. This script asks the Rust side to act on the servers
// by writing `need:<what>` lines on stdout; the answer is one line on stdin,
// `ok` or `fail: <why>`. Real headless Debian Chromium via playwright-core
// (ui/e2e/harness.mjs).
//
// Env: GATEHOUSE_URL (one-time sign-in URL), SCREENSHOT_DIR,
// CHROMIUM (default /usr/bin/chromium).
import { URL0, assert, log, openHarness } from "./harness.mjs";

// Later steps build on earlier ones: stop at the first failure.
const { page, step, ask, nav, shot, axe, tabUntil, cspHeldStep, finish } = await openHarness({
  profile: "gatehouse-live-",
  stopAtFirstFailure: true,
});

/** Asks the Rust side to do `what` to the real servers; throws on `fail:`. */
async function rust(what) {
  const reply = await ask(what);
  assert(reply === "ok", `${what}: ${reply}`);
}

/**
 * Opens the inbox until `server`'s card with `text` is there (the wrap posts
 * it). The "quiet" wrap asks the same question and its card stays until its
 * 3 s timeout, which the steps before may beat.
 */
async function inboxCard(text, server = "asker") {
  const card = page.locator("article.consent", { hasText: text }).filter({
    has: page.locator(".who", { hasText: new RegExp(`^\\s*Server ${server} \\(`) }),
  });
  const until = Date.now() + 15_000;
  for (;;) {
    await nav("Consent inbox");
    if (await card.count()) return card;
    assert(Date.now() < until, `no inbox card from ${server} with ${JSON.stringify(text)} within 15 s`);
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

await cspHeldStep();
await finish();

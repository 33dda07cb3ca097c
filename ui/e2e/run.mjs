// Browser end-to-end for the Gatehouse dashboard, driven from
// crates/gatehouse-server/tests/browser.rs (which seeds the database,
// serves the control plane and answers "need:event:<marker>" lines on
// stdout by inserting an event). Real headless Debian Chromium through
// playwright-core (ui/e2e/harness.mjs); no browser download.
//
// Env: GATEHOUSE_URL (one-time sign-in URL), SCREENSHOT_DIR, FRAME_COUNT,
// CHROMIUM (default /usr/bin/chromium).
import path from "node:path";

import { URL0, SHOTS, assert, log, openHarness } from "./harness.mjs";

const FRAME_COUNT = Number(process.env.FRAME_COUNT ?? "0");

const { context, page, dialogs, step, ask, nav, shot, axe, tabUntil, cspHeldStep, finish } =
  await openHarness({ profile: "gatehouse-e2e-", stopAtFirstFailure: false });

// Ask the Rust side for a live event and wait for its "ok".
const requestEvent = (marker) => ask(`event:${marker}`);

async function inert(where) {
  const active = await page.evaluate(() => ({
    pwned: window.__pwned ?? null,
    elements: document.querySelectorAll("main script, main img, main iframe, main object, main embed, main svg, main [onerror], main [onclick]").length,
  }));
  assert(active.pwned === null, `${where}: injected script ran`);
  assert(active.elements === 0, `${where}: server text produced ${active.elements} active elements`);
  assert(dialogs.length === 0, `${where}: a dialog opened: ${dialogs.join(" | ")}`);
}

await step("sign in with the one-time link", async () => {
  await page.goto(URL0);
  await page.getByRole("heading", { level: 1, name: "Overview" }).waitFor();
  assert(!page.url().includes("#t="), "the token is removed from the address bar");
  const stored = await page.evaluate(() => Object.keys(sessionStorage));
  assert(stored.includes("gatehouse.session"), "session token kept in sessionStorage");
  const cookies = await context.cookies();
  assert(cookies.length === 0, "no cookies are set");
  await shot("overview");
});

await step("a reused sign-in link is refused", async () => {
  // A new tab has its own sessionStorage: it holds no session.
  const p2 = await context.newPage();
  await p2.goto(URL0);
  await p2.getByRole("heading", { name: "Sign-in link not valid" }).waitFor();
  await p2.screenshot({ path: path.join(SHOTS, "signin-reused.png") });
  await p2.close();
});

await step("a bad sign-in link never signs a signed-in tab out", async () => {
  // Any page can navigate this tab to /signin with a token of its choosing.
  await page.goto(new URL("/signin#t=bogus", URL0).href);
  await page.getByRole("heading", { level: 1, name: "Overview" }).waitFor();
  const stored = await page.evaluate(() => sessionStorage.getItem("gatehouse.session"));
  assert(stored !== null, "the session is kept");
});

await step("API calls need the bearer header (no ambient credentials)", async () => {
  const [withToken, without] = await page.evaluate(async () => {
    const t = sessionStorage.getItem("gatehouse.session");
    const a = await fetch("/api/events/ticket", { method: "POST", headers: { Authorization: "Bearer " + t } });
    const b = await fetch("/api/events/ticket", { method: "POST" });
    return [a.status, b.status];
  });
  assert(withToken === 200, `own-origin POST with the token works (${withToken})`);
  assert(without === 401, `the same request without the header is refused (${without})`);
});

await step("an event appears live", async () => {
  await nav("Events");
  await page.getByText("connected", { exact: true }).waitFor({ timeout: 10_000 });
  const marker = "live-e2e-" + Date.now();
  await requestEvent(marker);
  await page.locator("#events-table tbody tr", { hasText: marker }).first().waitFor({ timeout: 10_000 });
  await shot("events");
});

await step("event detail shows invisible characters and stays inert", async () => {
  const row = page.locator("#events-table tbody tr", { hasText: "live-e2e-" }).first();
  await row.getByRole("button").click();
  await page.getByRole("heading", { name: /^Event \d+$/ }).waitFor();
  const ev = await page.locator(".evidence").first().textContent();
  assert(ev.includes("<U+200B>"), "zero-width space shown as <U+200B>");
  assert(ev.includes("<img src=x onerror=window.__pwned=1>"), "markup shown as text");
  await inert("event detail");
  await shot("event-detail");
});

await step(`corpus frames (${FRAME_COUNT}) render inertly`, async () => {
  await page.selectOption("select[name=since]", "");
  await page.fill("input[name=type]", "mcp_output_inspection");
  await page.getByRole("button", { name: "Apply filters" }).click();
  const rows = page.locator("#events-table tbody tr", { hasText: "frame:" });
  await page.waitForFunction(() => location.search.includes("type=mcp_output_inspection"));
  await page.waitForFunction(
    () => [...document.querySelectorAll("#events-table tbody tr")].every((r) => r.textContent.includes("frame:")) && document.querySelectorAll("#events-table tbody tr").length > 0,
  );
  // Load every page of frames.
  while (await page.getByRole("button", { name: "Load older events" }).isVisible()) {
    await page.getByRole("button", { name: "Load older events" }).click();
    await page.waitForTimeout(100);
  }
  const n = await rows.count();
  assert(n === FRAME_COUNT, `all ${FRAME_COUNT} frames listed (got ${n})`);
  for (let i = 0; i < n; i++) {
    await rows.nth(i).getByRole("button").click();
    await page.locator(".detail .evidence").first().waitFor();
  }
  const mermaid = rows.filter({ hasText: "mermaid-onerror" });
  await mermaid.first().getByRole("button").click();
  const txt = await page.locator(".detail .evidence").first().textContent();
  assert(txt.includes("onerror=electron.mcp.addServer"), "the onerror payload is visible as text");
  await inert("corpus frames");
  await shot("events-corpus-frames");
});

await step("approve a held tool in the diff view (keyboard reachable)", async () => {
  await nav("Tools & pins");
  await page.getByRole("button", { name: /Review read_file on files/ }).click();
  await page.locator(".diff-table").waitFor();
  const changed = await page.locator(".diff-table tr[data-kind=add], .diff-table tr[data-kind=change]").allTextContents();
  assert(changed.some((t) => t.includes("<IMPORTANT>")), "the diff shows the injected instruction");
  assert(changed.some((t) => t.includes("<U+200B>")), "the diff shows the zero-width space");
  await inert("diff view");
  const approveSel = "button[data-action=approve]";
  const hash = await page.locator(approveSel).getAttribute("data-hash");
  assert(hash && hash.endsWith("v2"), `approve names the version shown (${hash})`);
  const steps = await tabUntil(approveSel);
  await tabUntil("button[data-action=reject]");
  log(`     Tab reached approve in ${steps} presses`);
  await shot("tools-diff");
  await page.locator(approveSel).click();
  await page.locator("#tool-detail p.ok", { hasText: /^Approved read_file/ }).waitFor();
});

await step("consent inbox: answer one request, decline a sensitive one", async () => {
  await nav("Consent inbox");
  const city = page.locator("article.consent", { hasText: "Which city" });
  await city.waitFor();
  const who = await city.locator(".who").textContent();
  assert(/Server files \(npx -y @modelcontextprotocol\/server-filesystem \/home\/me\) via cursor asks:/.test(who), `names server, command and client: ${who}`);
  assert((await city.locator("blockquote").textContent()).includes("<U+200B>"), "invisible characters shown in the request text");
  const web = page.locator("article.consent", { hasText: "Paste your API key" });
  assert(await web.locator("[data-decline-only]").isVisible(), "sensitive request explains why it is declined");
  assert((await web.locator("input").count()) === 0, "no input field is offered for a secret");
  const disguised = page.locator("article.consent", { hasText: "Confirm the value" });
  assert(await disguised.locator("[data-decline-only]").isVisible(), "a field title disguised by a bidi override is decline-only");
  assert((await disguised.locator("input").count()) === 0, "no input field is offered for it");
  const notes = page.locator("article.consent", { hasText: "Name the note" });
  assert((await notes.locator("[data-decline-only]").textContent()).includes("restricted"), "restricted server's request is decline-only");
  await tabUntil("article.consent button[data-action=decline]");
  await tabUntil("article.consent button[data-action=accept]");
  await shot("consent");
  await axe("consent light");
  await city.getByLabel(/City/).fill("Bergen");
  await city.getByRole("button", { name: "Send answer" }).click();
  await city.waitFor({ state: "detached" });
  await web.getByRole("button", { name: "Decline" }).click();
  await web.waitFor({ state: "detached" });
});

await step("protect a client from the Clients page", async () => {
  await nav("Clients");
  const card = page.locator("article[data-client=cursor]");
  assert((await card.textContent()).includes("GITHUB_TOKEN"), "plain-text secret names are shown");
  assert(!(await card.textContent()).includes("ghp_canary"), "secret values are not");
  await card.getByRole("button", { name: "Protect Cursor" }).click();
  const report = page.locator("article[data-client=cursor] .change-report");
  await report.waitFor();
  assert((await report.textContent()).includes("protected github"), `report names the entry: ${await report.textContent()}`);
  await page.locator("article[data-client=cursor]").getByRole("button", { name: "Unprotect Cursor" }).waitFor();
  await shot("clients-protected");
});

await step("pause protection from the overview, then resume", async () => {
  await nav("Overview");
  const box = page.locator("section[data-protection]");
  assert((await box.getAttribute("data-protection")) === "active", "protection starts active");
  await box.getByRole("button", { name: "Pause for 1 h (audit only)" }).click();
  await page.locator("section[data-protection=paused]").waitFor();
  assert((await page.locator("section[data-protection]").textContent()).includes("block nothing"), "says what a pause means");
  const state = await page.evaluate(async () => {
    const t = sessionStorage.getItem("gatehouse.session");
    return (await fetch("/api/protection", { headers: { Authorization: "Bearer " + t } })).json();
  });
  assert(state.state === "paused" && state.until_ms > Date.now(), `the control plane stored the pause: ${JSON.stringify(state)}`);
  await shot("overview-paused");
  await page.getByRole("button", { name: "Resume now" }).click();
  await page.locator("section[data-protection=active]").waitFor();
});

const pages = ["Overview", "Events", "Tools & pins", "Consent inbox", "Clients", "Secrets", "Policy", "Sessions"];
await step("axe-core: no serious findings on any page, light theme", async () => {
  for (const p of pages) {
    await nav(p);
    await axe(p + " light");
    await shot(p.toLowerCase().replace(/[^a-z]+/g, "-") + "-light");
  }
});

await step("axe-core: no serious findings on any page, dark theme", async () => {
  await page.getByRole("button", { name: /Switch to dark theme/ }).click();
  assert((await page.evaluate(() => document.documentElement.dataset.theme)) === "dark", "dark theme applied");
  for (const p of pages) {
    await nav(p);
    await axe(p + " dark");
    await shot(p.toLowerCase().replace(/[^a-z]+/g, "-") + "-dark");
  }
});

await cspHeldStep();
await finish();

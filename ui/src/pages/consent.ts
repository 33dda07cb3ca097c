import { api, type ConsentRow } from "../api";
import { h, mount } from "../dom";
import { announce, badge, empty, errorBox, field, page } from "../ui";
import { prettyJson, renderText, revealed } from "../text";
import { localTime } from "../time";
import { toolReview } from "../review";

const KIND_LABEL: Record<string, string> = {
  changed_tool: "Changed tool definition",
  quarantined_tool: "Quarantined tool",
  shadow_tie: "Tool name shadowing",
  elicitation: "Input request",
  held_launch: "Changed server launch",
  held_package: "Package that looks like a typosquat",
};

/** What approving a held server means, in one sentence. */
function heldExplanation(c: ConsentRow, p: Record<string, unknown>): string | null {
  if (c.kind === "held_package") {
    return `It launches the package ${revealed(String(p.package ?? "?"))}, whose name is close to ${revealed(String(p.similar_to ?? "?"))}. ` +
      "It has not been started. Allow runs exactly this package for this server from its next start.";
  }
  if (c.kind === "held_launch") {
    return "What this server runs (executable, script or package) changed since it was approved. " +
      "It runs without its secrets and with its tools held. Allow approves exactly this launch; it takes effect at the server's next start.";
  }
  return null;
}

interface SchemaProp {
  type?: string;
  title?: string;
  description?: string;
  enum?: unknown[];
  default?: unknown;
}

function inputFor(name: string, p: SchemaProp): { el: HTMLElement; value: () => unknown } {
  if (Array.isArray(p.enum)) {
    const s = h("select", { name }, ...p.enum.map((v) => h("option", { value: String(v), text: revealed(String(v)) })));
    return { el: s, value: () => s.value };
  }
  if (p.type === "boolean") {
    const c = h("input", { type: "checkbox", name, checked: p.default === true });
    return { el: c, value: () => c.checked };
  }
  if (p.type === "number" || p.type === "integer") {
    const n = h("input", { type: "number", name, step: p.type === "integer" ? "1" : "any" });
    return { el: n, value: () => (n.value === "" ? undefined : Number(n.value)) };
  }
  const t = h("input", { type: "text", name, autocomplete: "off" });
  if (typeof p.default === "string") t.value = p.default;
  return { el: t, value: () => (t.value === "" ? undefined : t.value) };
}

function card(c: ConsentRow, refresh: () => void): HTMLElement {
  const msg = h("div", { attrs: { role: "status" } });
  const answer = async (action: "accept" | "decline", content?: Record<string, unknown>) => {
    try {
      await api(`/api/consent/${c.id}/answer`, { method: "POST", body: { action, content } });
      announce(action === "accept" ? "Answer sent." : "Request declined.");
      refresh();
    } catch (e) {
      mount(msg, errorBox(e));
    }
  };
  const who = h(
    "p",
    { class: "who" },
    "Server ",
    h("strong", {}, renderText(c.server_name)),
    c.command ? h("span", {}, " (", h("code", {}, renderText(c.command)), ")") : null,
    c.client ? h("span", {}, " via ", renderText(c.client)) : null,
    c.kind === "elicitation" ? " asks:" : "",
  );
  const head = h(
    "header",
    {},
    h("h2", {}, KIND_LABEL[c.kind] ?? c.kind, c.tool ? h("span", {}, ": ", renderText(c.tool)) : null),
    h("p", { class: "meta" }, "received ", h("time", { text: localTime(c.created_ms) }), c.expires_ms ? " · auto-declined at " + localTime(c.expires_ms) : "", c.restricted ? " " : "", c.restricted ? badge("restricted", "quarantined") : null),
    who,
  );
  const article = h("article", { class: "consent", attrs: { "data-consent-id": String(c.id), "data-kind": c.kind } }, head);
  const p = c.payload ?? {};

  if (c.kind === "changed_tool" || c.kind === "quarantined_tool") {
    const box = h("div", {}, h("p", { class: "loading", text: "Loading definition…" }));
    article.appendChild(box);
    toolReview(c.server_id, c.tool ?? "", { consentId: c.id, done: refresh })
      .then((el) => mount(box, el))
      .catch((e) => mount(box, errorBox(e)));
  } else if (c.kind === "elicitation") {
    article.appendChild(h("blockquote", { class: "asks" }, renderText(String(p.message ?? ""))));
    const decline = h("button", { type: "button", class: "danger", text: "Decline", attrs: { "data-action": "decline" }, on: { click: () => void answer("decline") } });
    if (c.decline_only) {
      article.appendChild(h("p", { class: "warn", attrs: { "data-decline-only": "true" } }, renderText(c.decline_only)));
      article.appendChild(h("div", { class: "buttons" }, decline));
    } else if (p.mode === "url") {
      article.appendChild(h("p", {}, "It asks you to open this address (Gatehouse never opens or fetches it):"));
      article.appendChild(h("pre", { class: "url" }, renderText(String(p.url ?? ""))));
      article.appendChild(h("div", { class: "buttons" }, h("button", { type: "button", class: "primary", text: "Accept", attrs: { "data-action": "accept" }, on: { click: () => void answer("accept", {}) } }), decline));
    } else {
      const schema = (p.requestedSchema ?? {}) as { properties?: Record<string, SchemaProp>; required?: string[] };
      const props = Object.entries(schema.properties ?? {});
      const getters: [string, () => unknown][] = [];
      const form = h("form", { class: "elicit", attrs: { "aria-label": "Answer for " + revealed(c.server_name) } });
      for (const [name, prop] of props) {
        const { el, value } = inputFor(name, prop);
        getters.push([name, value]);
        // Server-supplied text shows what it holds: a bidi override cannot
        // make `drowssap` read as "password".
        const label = revealed(prop.title ?? name) + ((schema.required ?? []).includes(name) ? " (required)" : "");
        form.appendChild(field(label, el, prop.description === undefined ? undefined : revealed(String(prop.description))));
      }
      form.appendChild(h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary", text: "Send answer", attrs: { "data-action": "accept" } }), decline));
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        const content: Record<string, unknown> = {};
        for (const [k, get] of getters) {
          const v = get();
          if (v !== undefined) content[k] = v;
        }
        void answer("accept", content);
      });
      article.appendChild(form);
    }
  } else {
    const why = heldExplanation(c, p);
    if (why) article.appendChild(h("p", {}, why));
    article.appendChild(h("pre", { class: "evidence" }, renderText(prettyJson(p))));
    article.appendChild(
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "button", class: "primary", text: "Allow", attrs: { "data-action": "accept" }, on: { click: () => void answer("accept", {}) } }),
        h("button", { type: "button", class: "danger", text: "Decline", attrs: { "data-action": "decline" }, on: { click: () => void answer("decline") } }),
      ),
    );
  }
  article.appendChild(msg);
  return article;
}

export async function consentPage(main: HTMLElement): Promise<() => void> {
  const list = h("div", { class: "inbox" });
  const refresh = async () => {
    try {
      const items = (await api<{ items: ConsentRow[] }>("/api/consent?state=pending")).items;
      mount(list, ...(items.length ? items.map((c) => card(c, () => void refresh())) : [empty("Nothing is waiting for you.", "Changed tools, quarantined tools and servers' input requests appear here.")]));
    } catch (e) {
      mount(list, errorBox(e));
    }
  };
  await refresh();
  mount(main, page("Consent inbox", "Everything waiting on you. Each request names the server, its command and client before anything else.", list));
  // Never rebuilt under the person's hand: a card that moves as another
  // expires must not put "Allow" where "Decline" was. WebKit does not focus
  // a clicked button, so the pointer counts as well as focus.
  let pointerInside = false;
  list.addEventListener("pointerenter", () => (pointerInside = true));
  list.addEventListener("pointerleave", () => (pointerInside = false));
  const timer = window.setInterval(() => {
    if (!pointerInside && !list.contains(document.activeElement)) void refresh();
  }, 5000);
  return () => window.clearInterval(timer);
}

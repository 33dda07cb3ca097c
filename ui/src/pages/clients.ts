import { api } from "../api";
import { h, mount } from "../dom";
import { announce, badge, empty, errorBox, page } from "../ui";
import { renderText } from "../text";

interface ClientServer {
  name: string;
  scope: string;
  transport: string;
  protected: string | null;
  secrets: string[];
  blocker: string | null;
}
interface ClientFile {
  path: string;
  error: string | null;
  servers: ClientServer[];
}
interface ClientRow {
  id: string;
  name: string;
  files: ClientFile[];
  blockers: string[];
  reload: string;
  servers: number;
  protected_servers: number;
  protected: boolean;
}

interface ChangeReport {
  ok: boolean;
  files: { path: string; changed: boolean; entries: string[]; skipped: { name: string; why: string }[]; notes: string[]; error: string | null }[];
}

function reportView(verb: string, r: ChangeReport): HTMLElement {
  return h(
    "ul",
    { class: "report" },
    ...r.files.map((f) =>
      h(
        "li",
        {},
        h("span", { class: "mono" }, renderText(f.path)),
        f.error ? h("span", { class: "error" }, ": ", renderText(f.error)) : `: ${f.entries.length ? verb + " " + f.entries.join(", ") : "nothing to do"}`,
        ...f.skipped.map((s) => h("div", { class: "warn" }, "skipped ", renderText(s.name), ": ", renderText(s.why))),
        ...f.notes.map((n) => h("div", {}, "note: ", renderText(n))),
      ),
    ),
  );
}

/** Protect / Unprotect; `done` gets the report to show under the redrawn card. */
function changeButtons(c: ClientRow, done: (report: HTMLElement) => void): HTMLElement {
  const status = h("div", { attrs: { role: "status" } });
  const run = async (undo: boolean, btn: HTMLButtonElement) => {
    btn.disabled = true;
    try {
      const r = await api<ChangeReport>(`/api/clients/${encodeURIComponent(c.id)}/${undo ? "unprotect" : "protect"}`, { method: "POST", body: {} });
      announce(`${c.name}: ${undo ? "restored" : "protected"}${r.ok ? "" : " with errors"}.`);
      done(h("div", { class: "change-report" }, reportView(undo ? "restored" : "protected", r)));
    } catch (e) {
      mount(status, errorBox(e));
      btn.disabled = false;
    }
  };
  const protect = h("button", { type: "button", class: "primary", text: "Protect", attrs: { "data-action": "protect", "aria-label": `Protect ${c.name}` } });
  protect.addEventListener("click", () => void run(false, protect));
  const unprotect = h("button", { type: "button", text: "Unprotect", attrs: { "data-action": "unprotect", "aria-label": `Unprotect ${c.name}` } });
  unprotect.addEventListener("click", () => void run(true, unprotect));
  return h("div", {}, h("div", { class: "buttons" }, c.protected ? null : protect, c.protected_servers > 0 ? unprotect : null), status);
}

function clientCard(c: ClientRow, canChange: boolean, done: (report: HTMLElement) => void): HTMLElement {
  return h(
    "article",
    { class: "consent", attrs: { "data-client": c.id } },
    h("h2", {}, renderText(c.name), " ", c.protected ? badge("protected", "trusted") : c.servers ? badge(`${c.protected_servers}/${c.servers} protected`, "held") : badge("no servers", "info")),
    c.blockers.length ? h("ul", {}, ...c.blockers.map((b) => h("li", { class: "warn" }, renderText(b)))) : null,
    ...c.files.map((f) =>
      h(
        "div",
        {},
        h("h3", { class: "mono" }, renderText(f.path)),
        f.error ? h("p", { class: "error" }, renderText(f.error)) : null,
        f.servers.length
          ? h(
              "ul",
              {},
              ...f.servers.map((s) =>
                h(
                  "li",
                  {},
                  renderText(s.name),
                  " ",
                  s.protected ? badge("protected", "trusted") : badge("not protected", "held"),
                  ` ${s.transport}, ${s.scope}`,
                  s.secrets.length ? h("span", {}, " · plain-text secrets: ", renderText(s.secrets.join(", "))) : null,
                  s.blocker ? h("span", { class: "warn" }, " ", renderText(s.blocker)) : null,
                ),
              ),
            )
          : h("p", { class: "intro", text: "No MCP servers in this file." }),
      ),
    ),
    canChange && c.servers > 0
      ? changeButtons(c, done)
      : h("p", { class: "intro" }, "To change: ", h("code", { text: (c.protected ? "gatehouse unprotect " : "gatehouse protect ") + c.id }), "."),
    h("p", { class: "intro" }, renderText(c.reload)),
  );
}

export async function clientsPage(main: HTMLElement): Promise<void> {
  const r = await api<{ available: boolean; can_change?: boolean; items: ClientRow[] }>("/api/clients");
  const found = r.items.filter((c) => c.files.length > 0);
  const list = h("div", { class: "inbox" });
  const render = (items: ClientRow[], report?: { id: string; el: HTMLElement }) =>
    mount(
      list,
      ...items.map((c) => {
        const card = clientCard(c, !!r.can_change, (el) => void redraw(c.id, el));
        if (report?.id === c.id) card.appendChild(report.el);
        return card;
      }),
    );
  // After a change the cards are redrawn from disk; the report stays under its card.
  const redraw = async (id: string, el: HTMLElement) => {
    const fresh = (await api<{ items: ClientRow[] }>("/api/clients")).items.filter((c) => c.files.length > 0);
    render(fresh, { id, el });
  };
  render(found);
  const body = !r.available
    ? empty("Client discovery is not available in this build.", "Use `gatehouse clients`, `gatehouse protect` and `gatehouse unprotect` in a terminal.")
    : found.length
      ? list
      : empty("No AI client configs found on this computer.", "Install Cursor, Claude Desktop, VS Code or another MCP client and add a server, then reload.");
  mount(main, page("Clients", "AI clients whose MCP servers Gatehouse can wrap. Protecting rewrites each server entry to run behind `gatehouse wrap` and moves plain-text secrets into the keyring; Unprotect restores each file exactly.", body));
}

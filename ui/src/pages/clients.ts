import { api } from "../api";
import { h, mount } from "../dom";
import { badge, empty, page } from "../ui";
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

function clientCard(c: ClientRow): HTMLElement {
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
    h("p", { class: "intro" }, "To change: ", h("code", { text: (c.protected ? "gatehouse unprotect --client " : "gatehouse protect --client ") + c.id }), ". ", renderText(c.reload)),
  );
}

export async function clientsPage(main: HTMLElement): Promise<void> {
  const r = await api<{ available: boolean; items: ClientRow[] }>("/api/clients");
  const found = r.items.filter((c) => c.files.length > 0);
  const body = !r.available
    ? empty("Client discovery is not available in this build.", "Use `gatehouse clients`, `gatehouse protect` and `gatehouse unprotect` in a terminal.")
    : found.length
      ? h("div", { class: "inbox" }, ...found.map(clientCard))
      : empty("No AI client configs found on this computer.", "Install Cursor, Claude Desktop, VS Code or another MCP client and add a server, then reload.");
  mount(main, page("Clients", "AI clients whose MCP servers Gatehouse can wrap. Protecting rewrites each server entry to run behind `gatehouse wrap`.", body));
}

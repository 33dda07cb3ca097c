import { api } from "../api";
import { h, mount } from "../dom";
import { badge, empty, errorBox, page, table } from "../ui";
import { renderText } from "../text";

interface ClientRow {
  id: string;
  name: string;
  config_path: string;
  protected: boolean;
  servers: number;
}

export async function clientsPage(main: HTMLElement): Promise<void> {
  const r = await api<{ available: boolean; items: ClientRow[] }>("/api/clients");
  const msg = h("div", { attrs: { role: "status" } });
  const act = async (c: ClientRow) => {
    try {
      await api(`/api/clients/${encodeURIComponent(c.id)}/${c.protected ? "unprotect" : "protect"}`, { method: "POST", body: {} });
      await clientsPage(main);
    } catch (e) {
      mount(msg, errorBox(e));
    }
  };
  const body = !r.available
    ? empty("Client management is not available in this build.", "Use `gatehouse protect` and `gatehouse unprotect` in a terminal.")
    : r.items.length
      ? table(
          "AI clients",
          ["Client", "Config", "Servers", "State", ""],
          r.items.map((c) =>
            h(
              "tr",
              {},
              h("td", {}, renderText(c.name)),
              h("td", { class: "mono" }, renderText(c.config_path)),
              h("td", { text: String(c.servers) }),
              h("td", {}, c.protected ? badge("protected", "trusted") : badge("not protected", "held")),
              h("td", {}, h("button", { type: "button", text: c.protected ? "Unprotect" : "Protect", on: { click: () => void act(c) } })),
            ),
          ),
        )
      : empty("No AI clients found on this computer.", "Install Cursor, Claude Desktop, VS Code or another MCP client, then reload.");
  mount(main, page("Clients", "AI clients whose MCP servers Gatehouse can wrap.", body, msg));
}

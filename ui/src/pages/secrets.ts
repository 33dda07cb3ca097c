import { api, type ServerRow } from "../api";
import { h, mount } from "../dom";
import { announce, empty, errorBox, field, page, table } from "../ui";
import { renderText, revealed } from "../text";

export async function secretsPage(main: HTMLElement): Promise<void> {
  const [v, servers] = await Promise.all([
    api<{ available: boolean; items: { server_id: string; server_name: string; names: string[] }[] }>("/api/vault"),
    api<{ items: ServerRow[] }>("/api/servers"),
  ]);
  const msg = h("div", { attrs: { role: "status" } });
  if (!v.available) {
    mount(main, page("Secrets", null, empty("The OS keyring is not reachable.", "Unlock or start your keyring (Secret Service, Keychain, Credential Manager), then restart `gatehouse up`.")));
    return;
  }
  const rows = v.items.flatMap((s) =>
    s.names.map((n) =>
      h(
        "tr",
        {},
        h("td", {}, renderText(s.server_name)),
        h("td", { class: "mono" }, renderText(n)),
        h(
          "td",
          {},
          h("button", {
            type: "button",
            class: "danger",
            text: "Delete",
            attrs: { "aria-label": `Delete ${n} of ${s.server_name}` },
            on: {
              click: async () => {
                try {
                  await api(`/api/vault/${encodeURIComponent(s.server_id)}/${encodeURIComponent(n)}`, { method: "DELETE" });
                  announce("Secret deleted.");
                  await secretsPage(main);
                } catch (e) {
                  mount(msg, errorBox(e));
                }
              },
            },
          }),
        ),
      ),
    ),
  );
  // Two configs may name different servers alike (a project's `github`
  // next to the user's): each option says which one it is.
  const server = h("select", { name: "server", required: true }, ...servers.items.map((s) => h("option", { value: s.id, text: serverLabel(s) })));
  const name = h("input", { type: "text", name: "name", required: true, autocomplete: "off", pattern: "[A-Za-z0-9_.-]+" });
  const value = h("input", { type: "password", name: "value", required: true, autocomplete: "new-password" });
  const form = h("form", { class: "filters", attrs: { "aria-label": "Store a secret" } }, field("Server", server), field("Name", name, "e.g. GITHUB_TOKEN"), field("Value", value, "Stored in the OS keyring; never shown again."), h("div", { class: "field actions" }, h("button", { type: "submit", class: "primary", text: "Store secret" })));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api(`/api/vault/${encodeURIComponent(server.value)}/${encodeURIComponent(name.value)}`, { method: "PUT", body: { value: value.value } });
      value.value = "";
      announce("Secret stored.");
      await secretsPage(main);
    } catch (err) {
      mount(msg, errorBox(err));
    }
  });
  mount(
    main,
    page(
      "Secrets",
      "Names of the secrets Gatehouse injects into wrapped servers. Values stay in the OS keyring.",
      rows.length ? table("Secrets", ["Server", "Name", ""], rows) : empty("No secrets stored.", "Protecting a client moves plain-text secrets from its config here; you can also add one below."),
      h("h2", { text: "Add or replace a secret" }),
      servers.items.length ? form : empty("No servers yet.", "Secrets belong to a server; protect a client first."),
      msg,
    ),
  );
}

/** A server as the person can tell it from another of the same name: its
 * name, client and command, invisible characters revealed, and its id. */
export function serverLabel(s: ServerRow): string {
  const parts = [revealed(s.name)];
  if (s.client) parts.push(`via ${revealed(s.client)}`);
  if (s.command) parts.push(`(${revealed(s.command)})`);
  parts.push(`[${s.id}]`);
  return parts.join(" ");
}

import { api, type ToolRow } from "../api";
import { h, mount } from "../dom";
import { badge, empty, errorBox, page, shortHash, table } from "../ui";
import { renderText, prettyJson } from "../text";
import { localTime } from "../time";
import { toolReview } from "../review";

export async function toolsPage(main: HTMLElement): Promise<void> {
  const panel = h("div", { class: "detail", id: "tool-detail" });
  const listBox = h("div", {});
  const refresh = async () => {
    const tools = (await api<{ items: ToolRow[] }>("/api/tools")).items;
    const order = (s: string) => ["quarantined", "held", "rejected", "invalid", "unpinned", "trusted"].indexOf(s);
    tools.sort((a, b) => order(a.state) - order(b.state) || a.server_name.localeCompare(b.server_name) || a.name.localeCompare(b.name));
    if (!tools.length) {
      mount(listBox, empty("No tools seen yet.", "Tools are recorded the first time a wrapped server lists them."));
      return;
    }
    mount(
      listBox,
      table(
        "Tools and their pins",
        ["Server", "Tool", "State", "Approved", "Pending", "Updated", ""],
        tools.map((t) => {
          const open = h("button", {
            type: "button",
            text: t.state === "held" || t.state === "quarantined" ? "Review" : "Details",
            attrs: { "aria-label": `${t.state === "held" || t.state === "quarantined" ? "Review" : "Details of"} ${t.name} on ${t.server_name}` },
            on: { click: () => void show(t) },
          });
          return h(
            "tr",
            { attrs: { "data-tool": t.name, "data-server": t.server_id } },
            h("td", {}, renderText(t.server_name)),
            h("td", {}, renderText(t.name)),
            h("td", {}, badge(t.state)),
            h("td", { class: "mono", text: shortHash(t.approved_hash) }),
            h("td", { class: "mono", text: shortHash(t.pending_hash) }),
            h("td", { text: localTime(t.updated_ms) }),
            h("td", {}, open),
          );
        }),
      ),
    );
  };
  const show = async (t: ToolRow) => {
    try {
      const waiting = t.state === "held" || t.state === "quarantined" || t.state === "rejected";
      const body = waiting
        ? await toolReview(t.server_id, t.name, { allowReset: true, done: () => void refresh() })
        : h(
            "div",
            {},
            h("h3", {}, "Definition of ", renderText(t.name)),
            h("p", {}, badge(t.state), " ", t.approved_hash ? "approved " + shortHash(t.approved_hash) : ""),
            h("pre", { class: "evidence" }, renderText(prettyJson(t.definition))),
            t.state !== "unpinned"
              ? h("button", {
                  type: "button",
                  class: "ghost",
                  text: "Reset pin",
                  attrs: { "data-action": "reset" },
                  on: {
                    click: async () => {
                      try {
                        await api("/api/pins/reset", { method: "POST", body: { server: t.server_id, tool: t.name } });
                        await refresh();
                        mount(panel, h("p", { class: "ok", text: "Pin reset." }));
                      } catch (e) {
                        mount(panel, errorBox(e));
                      }
                    },
                  },
                })
              : null,
          );
      mount(panel, h("h2", {}, renderText(t.server_name), " · ", renderText(t.name)), body);
      panel.scrollIntoView({ block: "nearest" });
    } catch (e) {
      mount(panel, errorBox(e));
    }
  };
  await refresh();
  mount(main, page("Tools & pins", "Each server's tools. A changed tool is held until you approve exactly the version shown.", h("div", { class: "split" }, h("div", { class: "scroll" }, listBox), panel)));
}

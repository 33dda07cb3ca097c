import { api, type EventRow } from "../api";
import { h, mount } from "../dom";
import { announce, badge, empty, errorBox, page, table } from "../ui";
import { localTime } from "../time";
import { renderText } from "../text";

interface Protection {
  state: "active" | "paused";
  until_ms?: number;
}

interface Overview {
  protection: Protection;
  servers: { id: string; name: string; client: string | null; protected: boolean; waiting: number }[];
  counts: { servers: number; tools_waiting: number; pending_consents: number; blocks_24h: number };
  recent_events: EventRow[];
}

/** The global pause every wrapped server follows (also set from the tray and `gatehouse pause`). */
function protectionBox(p: Protection, reload: () => void): HTMLElement {
  const msg = h("div", { attrs: { role: "status" } });
  const act = (path: string, body: unknown, said: string) => async () => {
    try {
      await api(path, { method: "POST", body });
      announce(said);
      reload();
    } catch (e) {
      mount(msg, errorBox(e));
    }
  };
  const paused = p.state === "paused";
  return h(
    "section",
    { class: paused ? "protection paused" : "protection", attrs: { "aria-labelledby": "protection-h", "data-protection": p.state } },
    h("h2", { id: "protection-h", text: "Protection" }),
    h(
      "p",
      {},
      paused
        ? `Paused until ${localTime(p.until_ms ?? 0)}: wrapped servers record what they would block, and block nothing. It resumes by itself.`
        : "Active: every verdict is enforced.",
    ),
    paused
      ? h("button", { type: "button", class: "primary", text: "Resume now", on: { click: act("/api/protection/resume", {}, "Protection resumed.") } })
      : h("button", { type: "button", text: "Pause for 1 h (audit only)", on: { click: act("/api/protection/pause", { minutes: 60 }, "Protection paused for 1 h.") } }),
    msg,
  );
}

export async function overviewPage(main: HTMLElement): Promise<void> {
  const o = await api<Overview>("/api/overview");
  const reload = () => void overviewPage(main);
  const card = (label: string, value: number, href: string) =>
    h("a", { class: "card", href }, h("span", { class: "card-value", text: String(value) }), h("span", { class: "card-label", text: label }));
  mount(
    main,
    page(
      "Overview",
      "What Gatehouse protects and what needs you.",
      protectionBox(o.protection, reload),
      h(
        "div",
        { class: "cards" },
        card("servers seen", o.counts.servers, "/tools"),
        card("tools waiting for review", o.counts.tools_waiting, "/tools"),
        card("pending consent requests", o.counts.pending_consents, "/consent"),
        card("blocks in the last 24 h", o.counts.blocks_24h, "/events?action=block&since=24h"),
      ),
      h("h2", { text: "Protection per server" }),
      o.servers.length
        ? table(
            "Servers",
            ["Server", "Client", "Protected", "Waiting"],
            o.servers.map((s) =>
              h(
                "tr",
                {},
                h("td", {}, renderText(s.name)),
                h("td", {}, renderText(s.client ?? "—")),
                h("td", {}, s.protected ? badge("protected", "trusted") : badge("wrapped only", "held")),
                h("td", { text: String(s.waiting) }),
              ),
            ),
          )
        : empty("No servers yet.", "Protect a client (Clients page or `gatehouse protect`) and use it; wrapped servers appear here."),
      h("h2", { text: "Recent events" }),
      o.recent_events.length
        ? h(
            "ul",
            { class: "recent" },
            ...o.recent_events.map((e) =>
              h("li", {}, h("time", { text: localTime(e.time_ms) }), " ", badge(e.severity), " ", badge(e.action), " ", renderText(e.server_name ?? e.server_id ?? "gatehouse"), " · ", renderText(e.reason)),
            ),
          )
        : empty("No events yet.", "Events appear as soon as a wrapped server is used."),
    ),
  );
}

import { api, liveEvents, type EventRow, type ServerRow } from "../api";
import { h, mount, append } from "../dom";
import { ACTIONS, SEVERITIES, emptyFilters, fromQuery, isEmpty, matches, toApiQuery, toQuery, type EventFilters } from "../filters";
import { announce, badge, empty, field, page } from "../ui";
import { localTime } from "../time";
import { countInvisible, prettyJson, renderText } from "../text";

export async function eventsPage(main: HTMLElement, query: string): Promise<() => void> {
  const filters: EventFilters = fromQuery(query);
  const servers = (await api<{ items: ServerRow[] }>("/api/servers")).items;
  const tbody = h("tbody", {});
  const detail = h("div", { class: "detail", attrs: { "aria-live": "polite" } });
  const status = h("span", { class: "live-state", text: "connecting…" });
  const more = h("button", { type: "button", text: "Load older events", hidden: true });
  const emptyBox = h("div", {});
  let before: number | null = null;
  let shown = 0;

  const select = (name: keyof EventFilters, options: string[], label: string) => {
    const s = h("select", { name }, h("option", { value: "", text: "any" }), ...options.map((o) => h("option", { value: o, text: o })));
    s.value = filters[name];
    return field(label, s);
  };
  const serverSelect = h("select", { name: "server" }, h("option", { value: "", text: "any" }), ...servers.map((s) => h("option", { value: s.id, text: s.name })));
  serverSelect.value = filters.server;
  const toolInput = h("input", { type: "text", name: "tool", value: filters.tool, autocomplete: "off" });
  const typeInput = h("input", { type: "text", name: "type", value: filters.type, autocomplete: "off" });
  const form = h(
    "form",
    { class: "filters", attrs: { "aria-label": "Event filters" } },
    field("Server", serverSelect),
    field("Tool", toolInput),
    field("Type", typeInput),
    select("severity", [...SEVERITIES], "Minimum severity"),
    select("action", [...ACTIONS], "Action"),
    select("since", ["1h", "24h", "7d", "30d"], "Since"),
    h("div", { class: "field actions" }, h("button", { type: "submit", text: "Apply filters" }), h("button", { type: "reset", class: "ghost", text: "Clear" })),
  );

  const row = (e: EventRow, live = false) => {
    const when = localTime(e.time_ms);
    const open = h("button", { type: "button", class: "link", text: when, attrs: { "aria-label": `${when}: details of event ${e.id}` } });
    open.addEventListener("click", () => showDetail(e));
    const tr = h(
      "tr",
      { class: live ? "fresh" : "", attrs: { "data-event-id": String(e.id) } },
      h("td", {}, open),
      h("td", {}, badge(e.severity)),
      h("td", {}, badge(e.action)),
      h("td", {}, renderText(e.type)),
      h("td", {}, renderText(e.server_name ?? e.server_id ?? "—")),
      h("td", {}, renderText(e.tool ?? "—")),
      h("td", { class: "reason" }, renderText(e.reason), e.count > 1 ? h("span", { class: "count", text: " ×" + e.count }) : null),
    );
    return tr;
  };

  const showDetail = (e: EventRow) => {
    const ev = prettyJson(e.evidence);
    const inv = countInvisible(ev) + countInvisible(e.reason);
    mount(
      detail,
      h("h2", { text: "Event " + e.id }),
      h(
        "dl",
        {},
        h("dt", { text: "Time" }), h("dd", { text: localTime(e.time_ms) + (e.count > 1 ? ` (×${e.count}, last ${localTime(e.last_time_ms)})` : "") }),
        h("dt", { text: "Type" }), h("dd", {}, renderText(e.type)),
        h("dt", { text: "Server" }), h("dd", {}, renderText(e.server_name ?? e.server_id ?? "—")),
        h("dt", { text: "Tool" }), h("dd", {}, renderText(e.tool ?? "—")),
        h("dt", { text: "Rule" }), h("dd", {}, renderText(e.rule ?? "—")),
        h("dt", { text: "Severity" }), h("dd", {}, badge(e.severity)),
        h("dt", { text: "Action" }), h("dd", {}, badge(e.action)),
        h("dt", { text: "Reason" }), h("dd", {}, renderText(e.reason)),
      ),
      h("h3", { text: "Evidence (redacted)" }),
      inv ? h("p", { class: "warn", text: `${inv} invisible character${inv === 1 ? "" : "s"} shown as <U+…> markers.` }) : null,
      h("pre", { class: "evidence" }, renderText(ev)),
    );
  };

  const load = async (reset: boolean) => {
    if (reset) {
      before = null;
      shown = 0;
      mount(tbody);
    }
    const extra: Record<string, string> = { limit: "100" };
    if (before !== null) extra.before = String(before);
    const r = await api<{ items: EventRow[]; next_before: number | null }>("/api/events?" + toApiQuery(filters, Date.now(), extra));
    append(tbody, ...r.items.map((e) => row(e)));
    shown += r.items.length;
    before = r.next_before;
    more.hidden = before === null;
    mount(emptyBox, shown ? null : empty(isEmpty(filters) ? "No events yet." : "No events match these filters.", isEmpty(filters) ? "Events appear here live as wrapped servers are used." : "Clear or widen the filters."));
  };

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    for (const k of Object.keys(emptyFilters()) as (keyof EventFilters)[]) filters[k] = String(fd.get(k) ?? "").trim();
    const qs = toQuery(filters);
    history.replaceState(null, "", "/events" + (qs ? "?" + qs : ""));
    void load(true);
  });
  form.addEventListener("reset", () => {
    setTimeout(() => {
      Object.assign(filters, emptyFilters());
      history.replaceState(null, "", "/events");
      void load(true);
    });
  });
  more.addEventListener("click", () => void load(false));

  mount(
    main,
    page(
      "Events",
      "Every decision Gatehouse made, newest first. New events appear live.",
      form,
      h("p", { class: "live" }, "Live: ", status),
      h("div", { class: "split" }, h("div", { class: "scroll" }, h("table", { id: "events-table" }, h("caption", { class: "sr-only", text: "Events" }), h("thead", {}, h("tr", {}, ...["Time", "Severity", "Action", "Type", "Server", "Tool", "Reason"].map((t) => h("th", { attrs: { scope: "col" }, text: t })))), tbody), emptyBox, more), detail),
    ),
  );
  await load(true);

  const stream = liveEvents(
    "",
    (raw) => {
      const e = raw as EventRow;
      if (!matches(filters, e, Date.now())) return;
      if (tbody.querySelector(`[data-event-id="${CSS.escape(String(e.id))}"]`)) return;
      tbody.insertBefore(row(e, true), tbody.firstChild);
      shown++;
      mount(emptyBox);
      announce(`New ${e.severity} event: ${e.type}`);
    },
    (live) => {
      status.textContent = live ? "connected" : "reconnecting…";
      status.className = "live-state " + (live ? "on" : "off");
    },
  );
  return () => stream.stop();
}

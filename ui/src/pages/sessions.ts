import { api, type SessionRow } from "../api";
import { h, mount } from "../dom";
import { errorBox, page, table } from "../ui";
import { renderText } from "../text";
import { localTime } from "../time";

export async function sessionsPage(main: HTMLElement): Promise<void> {
  const r = await api<{ items: SessionRow[] }>("/api/sessions");
  const msg = h("div", { attrs: { role: "status" } });
  mount(
    main,
    page(
      "Sessions",
      "Browsers signed in to this dashboard. Revoke any you do not recognise; each sign-in is also an event.",
      table(
        "Signed-in sessions",
        ["Signed in", "Last seen", "Expires", "Browser", ""],
        r.items.map((s) =>
          h(
            "tr",
            {},
            h("td", { text: localTime(s.created_ms) }),
            h("td", { text: localTime(s.last_seen_ms) }),
            h("td", { text: localTime(s.expires_ms) }),
            h("td", {}, renderText(s.user_agent || "—"), s.current ? h("strong", { text: " (this tab)" }) : null),
            h(
              "td",
              {},
              h("button", {
                type: "button",
                class: "danger",
                text: s.current ? "Sign out" : "Revoke",
                on: {
                  click: async () => {
                    try {
                      await api(`/api/sessions/${encodeURIComponent(s.id)}`, { method: "DELETE" });
                      if (!s.current) await sessionsPage(main);
                      else location.assign("/overview");
                    } catch (e) {
                      mount(msg, errorBox(e));
                    }
                  },
                },
              }),
            ),
          ),
        ),
      ),
      msg,
    ),
  );
}

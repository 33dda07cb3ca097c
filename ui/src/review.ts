// Reviewing one changed or quarantined tool: the diff, the findings, and
// buttons that act on exactly the version shown.
import { api, type DiffResp } from "./api";
import { h, mount } from "./dom";
import { diffView } from "./diffview";
import { announce, errorBox, shortHash } from "./ui";
import { prettyJson, renderText } from "./text";

export interface ReviewOptions {
  /// Called after a decision so the caller can refresh.
  done: () => void;
  /// Show the "Reset pin" button (tools page).
  allowReset?: boolean;
  /// A consent request this review answers (inbox).
  consentId?: number;
}

function findingsList(f: unknown): HTMLElement | null {
  if (!f || (Array.isArray(f) && f.length === 0)) return null;
  const items = Array.isArray(f) ? f : [f];
  return h(
    "div",
    { class: "findings" },
    h("h3", { text: "Findings" }),
    h(
      "ul",
      {},
      ...items.map((x) => {
        const o = (x ?? {}) as Record<string, unknown>;
        if (typeof o === "object" && ("rule" in o || "severity" in o)) {
          return h(
            "li",
            {},
            h("strong", {}, renderText(String(o.severity ?? ""))),
            " ",
            renderText(String(o.rule ?? o.id ?? "")),
            o.message || o.reason ? h("span", {}, " — ", renderText(String(o.message ?? o.reason))) : null,
            o.evidence ? h("pre", { class: "evidence" }, renderText(typeof o.evidence === "string" ? o.evidence : prettyJson(o.evidence))) : null,
          );
        }
        return h("li", {}, h("pre", { class: "evidence" }, renderText(prettyJson(x))));
      }),
    ),
  );
}

export async function toolReview(server: string, tool: string, opts: ReviewOptions): Promise<HTMLElement> {
  const d = await api<DiffResp>(`/api/pins/diff?server=${encodeURIComponent(server)}&tool=${encodeURIComponent(tool)}`);
  const msg = h("div", { attrs: { role: "status" } });
  const act = async (what: string, fn: () => Promise<unknown>) => {
    try {
      await fn();
      announce(what);
      mount(msg, h("p", { class: "ok", text: what }));
      opts.done();
    } catch (e) {
      mount(msg, errorBox(e));
    }
  };
  const hash = d.to?.hash ?? null;
  const approve = hash
    ? h("button", {
        type: "button",
        class: "primary",
        text: "Approve this version (" + shortHash(hash) + ")",
        attrs: { "data-action": "approve", "data-hash": hash },
        on: {
          click: () =>
            act(
              "Approved " + tool + " at " + shortHash(hash) + ".",
              () =>
                opts.consentId !== undefined
                  ? api(`/api/consent/${opts.consentId}/answer`, { method: "POST", body: { action: "accept", hash } })
                  : api("/api/pins/approve", { method: "POST", body: { server, tool, hash } }),
            ),
        },
      })
    : null;
  const reject = h("button", {
    type: "button",
    class: "danger",
    text: "Reject",
    attrs: { "data-action": "reject" },
    on: {
      click: () =>
        act("Rejected the new definition of " + tool + "; its calls stay blocked.", () =>
          opts.consentId !== undefined
            ? api(`/api/consent/${opts.consentId}/answer`, { method: "POST", body: { action: "decline" } })
            : api("/api/pins/reject", { method: "POST", body: { server, tool } }),
        ),
    },
  });
  const reset = opts.allowReset
    ? h("button", {
        type: "button",
        class: "ghost",
        text: "Reset pin",
        attrs: { "data-action": "reset", title: "Forget this pin; the next definition seen is pinned again" },
        on: { click: () => act("Reset the pin of " + tool + ".", () => api("/api/pins/reset", { method: "POST", body: { server, tool } })) },
      })
    : null;
  const waiting = d.state === "held" || d.state === "quarantined" || d.state === "rejected";
  return h(
    "div",
    { class: "review" },
    h("h3", {}, "Definition of ", renderText(tool)),
    d.to || d.from ? diffView(d) : h("p", { text: "No definition recorded." }),
    findingsList(d.findings),
    h("div", { class: "buttons" }, waiting ? approve : null, waiting ? reject : null, reset),
    msg,
  );
}

// The side-by-side definition diff, rendered as text cells only.
import { h } from "./dom";
import { diffDefinitions, changedCount } from "./diff";
import { renderText } from "./text";
import { shortHash } from "./ui";
import type { DiffResp } from "./api";
import { localTime } from "./time";

export function diffView(d: DiffResp): HTMLElement {
  const rows = diffDefinitions(d.from?.definition ?? null, d.to?.definition ?? null);
  const changes = changedCount(rows);
  const cell = (c: { n: number; text: string } | undefined, side: string) =>
    c
      ? [h("td", { class: "ln", text: String(c.n) }), h("td", { class: "code " + side }, renderText(c.text))]
      : [h("td", { class: "ln" }), h("td", { class: "code blank" })];
  return h(
    "div",
    { class: "diff" },
    h(
      "p",
      { class: "diff-summary" },
      `${changes} changed line${changes === 1 ? "" : "s"} · approved ${shortHash(d.from?.hash)} (${localTime(d.from?.first_seen_ms)}) → new ${shortHash(d.to?.hash)} (${localTime(d.to?.first_seen_ms)})`,
    ),
    h(
      "table",
      { class: "diff-table" },
      h("caption", { class: "sr-only", text: "Old definition on the left, new definition on the right" }),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { attrs: { scope: "col" }, class: "ln", text: "#" }),
          h("th", { attrs: { scope: "col" }, text: d.from ? "Approved " + shortHash(d.from.hash) : "Approved (none)" }),
          h("th", { attrs: { scope: "col" }, class: "ln", text: "#" }),
          h("th", { attrs: { scope: "col" }, text: d.to ? "New " + shortHash(d.to.hash) : "New (none)" }),
        ),
      ),
      h(
        "tbody",
        {},
        ...rows.map((r) =>
          h("tr", { class: "d-" + r.kind, attrs: { "data-kind": r.kind } }, ...cell(r.left, "old"), ...cell(r.right, "new")),
        ),
      ),
    ),
  );
}

// Small shared pieces: headings, badges, empty states, tables, errors.
import { h, type Child } from "./dom";
import { ApiError } from "./api";

export function page(title: string, intro: string | null, ...children: Child[]): HTMLElement {
  return h("section", { class: "page" }, h("h1", { text: title }), intro ? h("p", { class: "intro", text: intro }) : null, ...children);
}

export function badge(value: string, kind = value): HTMLElement {
  return h("span", { class: "badge b-" + kind.replace(/[^a-z_]/g, "") }, value);
}

export function empty(title: string, hint: string): HTMLElement {
  return h("div", { class: "empty", attrs: { role: "status" } }, h("p", { class: "empty-title", text: title }), h("p", { text: hint }));
}

export function errorBox(err: unknown): HTMLElement {
  const msg = err instanceof ApiError ? err.message : "Something went wrong talking to Gatehouse.";
  return h("div", { class: "error", attrs: { role: "alert" } }, msg);
}

export function table(caption: string, headers: string[], rows: HTMLTableRowElement[]): HTMLTableElement {
  return h(
    "table",
    {},
    h("caption", { class: "sr-only", text: caption }),
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", { attrs: { scope: "col" }, text: t })))),
    h("tbody", {}, ...rows),
  );
}

export function shortHash(hash: string | null | undefined): string {
  if (!hash) return "—";
  const bare = hash.includes(":") ? hash.split(":").pop() ?? hash : hash;
  return bare.slice(0, 12);
}

export function announce(msg: string): void {
  const live = document.getElementById("live");
  if (live) live.textContent = msg;
}

export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || "f-" + Math.random().toString(36).slice(2);
  control.id = id;
  return h("div", { class: "field" }, h("label", { htmlFor: id, text: label }), control, hint ? h("small", { text: hint }) : null);
}

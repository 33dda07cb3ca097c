// The only way the dashboard builds DOM. Text goes in through text nodes
// (never innerHTML); attributes are set one by one and never from a URL a
// server supplied. Everything a server sends is data, never markup.

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  class?: string;
  id?: string;
  attrs?: Record<string, string>;
  on?: { [K in keyof HTMLElementEventMap]?: (ev: HTMLElementEventMap[K]) => void };
  [key: string]: unknown;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = String(v);
    else if (k === "id") el.id = String(v);
    else if (k === "attrs") {
      for (const [a, av] of Object.entries(v as Record<string, string>)) el.setAttribute(a, av);
    } else if (k === "on") {
      for (const [ev, fn] of Object.entries(v as Record<string, EventListener>)) el.addEventListener(ev, fn);
    } else if (k === "text") {
      el.textContent = String(v);
    } else {
      // Plain properties such as type, value, disabled, checked, htmlFor.
      (el as unknown as Record<string, unknown>)[k] = v;
    }
  }
  append(el, ...children);
  return el;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/// Replaces an element's content.
export function mount(el: Element, ...children: Child[]): void {
  clear(el);
  append(el, ...children);
}

// Side-by-side line diff of two tool definitions (old approved vs new).
import { sortKeys } from "./text";

export type RowKind = "same" | "del" | "add" | "change";

export interface Cell {
  n: number; // 1-based line number
  text: string;
}

export interface Row {
  kind: RowKind;
  left?: Cell;
  right?: Cell;
}

/// A definition as lines that diff well: name, description line by line,
/// then every other field as sorted pretty JSON.
export function definitionLines(def: unknown): string[] {
  if (def === null || def === undefined) return [];
  if (typeof def !== "object" || Array.isArray(def)) return JSON.stringify(def, null, 2).split("\n");
  const o = def as Record<string, unknown>;
  const lines: string[] = [];
  if ("name" in o) lines.push("name: " + String(o.name));
  if ("title" in o) lines.push("title: " + String(o.title));
  if ("description" in o) {
    lines.push("description:");
    for (const l of String(o.description ?? "").split("\n")) lines.push("  " + l);
  }
  for (const k of Object.keys(o).sort()) {
    if (k === "name" || k === "title" || k === "description") continue;
    lines.push(k + ":");
    for (const l of JSON.stringify(sortKeys(o[k]), null, 2).split("\n")) lines.push("  " + l);
  }
  return lines;
}

const MAX_CELLS = 4_000_000;

/// Longest-common-subsequence line diff, with runs of deletions and
/// additions paired into "change" rows for a side-by-side view.
export function diffLines(a: string[], b: string[]): Row[] {
  const n = a.length;
  const m = b.length;
  if (n * m > MAX_CELLS) {
    // Too large to align: show both sides whole.
    const rows: Row[] = [];
    for (let i = 0; i < Math.max(n, m); i++) {
      const left = i < n ? { n: i + 1, text: a[i] } : undefined;
      const right = i < m ? { n: i + 1, text: b[i] } : undefined;
      rows.push({ kind: left && right ? (a[i] === b[i] ? "same" : "change") : left ? "del" : "add", left, right });
    }
    return rows;
  }
  // lcs[i][j] = LCS length of a[i..], b[j..]
  const lcs: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const raw: Row[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      raw.push({ kind: "same", left: { n: i + 1, text: a[i] }, right: { n: j + 1, text: b[j] } });
      i++;
      j++;
    } else if (j < m && (i >= n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      raw.push({ kind: "add", right: { n: j + 1, text: b[j] } });
      j++;
    } else {
      raw.push({ kind: "del", left: { n: i + 1, text: a[i] } });
      i++;
    }
  }
  return pairChanges(raw);
}

function pairChanges(raw: Row[]): Row[] {
  const out: Row[] = [];
  let k = 0;
  while (k < raw.length) {
    if (raw[k].kind === "same") {
      out.push(raw[k++]);
      continue;
    }
    const dels: Cell[] = [];
    const adds: Cell[] = [];
    while (k < raw.length && raw[k].kind !== "same") {
      const r = raw[k++];
      if (r.kind === "del" && r.left) dels.push(r.left);
      if (r.kind === "add" && r.right) adds.push(r.right);
    }
    for (let x = 0; x < Math.max(dels.length, adds.length); x++) {
      const left = dels[x];
      const right = adds[x];
      out.push({ kind: left && right ? "change" : left ? "del" : "add", left, right });
    }
  }
  return out;
}

export function diffDefinitions(from: unknown, to: unknown): Row[] {
  return diffLines(definitionLines(from), definitionLines(to));
}

export function changedCount(rows: Row[]): number {
  return rows.filter((r) => r.kind !== "same").length;
}

// Shows what is really in server-supplied text: invisible and control
// characters become visible markers such as <U+200B>.

export interface Segment {
  text: string;
  invisible: boolean;
}

/// Characters that render as nothing (or reorder text) but change meaning.
export function isInvisible(cp: number): boolean {
  return (
    (cp < 0x20 && cp !== 0x0a && cp !== 0x09) || // C0 controls (ESC for ANSI, NUL, …) except newline/tab
    (cp >= 0x7f && cp <= 0x9f) || // DEL and C1 controls
    cp === 0x00ad || // soft hyphen
    cp === 0x034f || // combining grapheme joiner
    cp === 0x061c || // Arabic letter mark
    cp === 0x115f || cp === 0x1160 || cp === 0x3164 || cp === 0xffa0 || // Hangul fillers
    cp === 0x180e || // Mongolian vowel separator
    (cp >= 0x200b && cp <= 0x200f) || // zero-width space/joiners, LRM/RLM
    (cp >= 0x2028 && cp <= 0x202e) || // line/paragraph separators, bidi embeddings/overrides
    (cp >= 0x2060 && cp <= 0x206f) || // word joiner, invisible operators, bidi isolates
    cp === 0xfeff || // BOM / zero-width no-break space
    (cp >= 0xfe00 && cp <= 0xfe0f) || // variation selectors
    (cp >= 0xfff9 && cp <= 0xfffb) || // interlinear annotations
    (cp >= 0xe0000 && cp <= 0xe007f) || // tag characters (ASCII smuggling)
    (cp >= 0xe0100 && cp <= 0xe01ef) // variation selectors supplement
  );
}

export function codepointLabel(cp: number): string {
  return "<U+" + cp.toString(16).toUpperCase().padStart(4, "0") + ">";
}

/// Splits text into visible runs and one marker per invisible character.
export function revealInvisible(s: string): Segment[] {
  const out: Segment[] = [];
  let run = "";
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (isInvisible(cp)) {
      if (run) out.push({ text: run, invisible: false });
      run = "";
      out.push({ text: codepointLabel(cp), invisible: true });
    } else {
      run += ch;
    }
  }
  if (run) out.push({ text: run, invisible: false });
  return out;
}

/// The revealed string (markers inline), e.g. for copying or tests.
export function revealed(s: string): string {
  return revealInvisible(s).map((x) => x.text).join("");
}

export function countInvisible(s: string): number {
  return revealInvisible(s).filter((x) => x.invisible).length;
}

/// Renders text as DOM text nodes with highlighted markers; never markup.
export function renderText(s: string, className = "txt"): HTMLElement {
  const span = document.createElement("span");
  span.className = className;
  for (const seg of revealInvisible(s)) {
    if (seg.invisible) {
      const m = document.createElement("span");
      m.className = "invis";
      m.title = "invisible character";
      m.textContent = seg.text;
      span.appendChild(m);
    } else {
      span.appendChild(document.createTextNode(seg.text));
    }
  }
  return span;
}

/// Pretty JSON for display (stable key order), as text.
export function prettyJson(v: unknown): string {
  return JSON.stringify(sortKeys(v), null, 2) ?? "null";
}

export function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sortKeys(o[k])]));
  }
  return v;
}

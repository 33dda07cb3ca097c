// Event filters: one shape for the URL, the API query and live matching.

export interface EventFilters {
  server: string;
  tool: string;
  type: string;
  severity: string; // minimum severity
  action: string;
  since: string; // preset: "", "1h", "24h", "7d", "30d"
}

export const SEVERITIES = ["info", "low", "medium", "high", "critical"] as const;
export const ACTIONS = ["allow", "audit", "alert", "block", "hold"] as const;
export const SINCE_PRESETS: Record<string, number> = {
  "1h": 3_600_000,
  "24h": 86_400_000,
  "7d": 7 * 86_400_000,
  "30d": 30 * 86_400_000,
};

export function emptyFilters(): EventFilters {
  return { server: "", tool: "", type: "", severity: "", action: "", since: "" };
}

const KEYS: (keyof EventFilters)[] = ["server", "tool", "type", "severity", "action", "since"];

/// Reads filters from a query string, dropping unknown or invalid values.
export function fromQuery(qs: string): EventFilters {
  const p = new URLSearchParams(qs);
  const f = emptyFilters();
  for (const k of KEYS) f[k] = (p.get(k) ?? "").trim();
  if (f.severity && !(SEVERITIES as readonly string[]).includes(f.severity)) f.severity = "";
  if (f.action && !(ACTIONS as readonly string[]).includes(f.action)) f.action = "";
  if (f.since && !(f.since in SINCE_PRESETS)) f.since = "";
  return f;
}

/// The page URL's query string (only non-empty filters, stable order).
export function toQuery(f: EventFilters): string {
  const p = new URLSearchParams();
  for (const k of KEYS) if (f[k]) p.set(k, f[k]);
  return p.toString();
}

/// The API query: presets become absolute `since` times.
export function toApiQuery(f: EventFilters, now: number, extra: Record<string, string> = {}): string {
  const p = new URLSearchParams();
  for (const k of ["server", "tool", "type", "severity", "action"] as const) if (f[k]) p.set(k, f[k]);
  if (f.since) p.set("since", String(now - SINCE_PRESETS[f.since]));
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  return p.toString();
}

export interface EventLike {
  server_id?: string | null;
  tool?: string | null;
  type?: string;
  severity?: string;
  action?: string;
  time_ms?: number;
}

/// Whether a live event belongs in the current filtered view.
export function matches(f: EventFilters, ev: EventLike, now: number): boolean {
  if (f.server && ev.server_id !== f.server) return false;
  if (f.tool && ev.tool !== f.tool) return false;
  if (f.type && ev.type !== f.type) return false;
  if (f.action && ev.action !== f.action) return false;
  if (f.severity) {
    const min = SEVERITIES.indexOf(f.severity as (typeof SEVERITIES)[number]);
    const got = SEVERITIES.indexOf((ev.severity ?? "") as (typeof SEVERITIES)[number]);
    if (got < min) return false;
  }
  if (f.since && (ev.time_ms ?? 0) < now - SINCE_PRESETS[f.since]) return false;
  return true;
}

export function isEmpty(f: EventFilters): boolean {
  return KEYS.every((k) => !f[k]);
}

// Talks to /api/. The session token lives in this tab's sessionStorage and
// is sent as a bearer header: no cookies, so other sites and other ports on
// 127.0.0.1 cannot ride on it.

const TOKEN_KEY = "gatehouse.session";

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
  ) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t: string | null): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

let onSignedOut: () => void = () => {};
export function whenSignedOut(fn: () => void): void {
  onSignedOut = fn;
}

export async function api<T = unknown>(path: string, init: { method?: string; body?: unknown } = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method: init.method ?? "GET",
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
  });
  if (resp.status === 204) return undefined as T;
  let data: unknown = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const err = (data as { error?: { code?: string; message?: string } } | null)?.error;
    if (resp.status === 401 && err?.code === "unauthorized") {
      setToken(null);
      onSignedOut();
    }
    throw new ApiError(resp.status, err?.code ?? "http_" + resp.status, err?.message ?? "request failed (" + resp.status + ")");
  }
  return data as T;
}

/// Exchanges a one-time sign-in token (from the URL fragment) for a session.
export async function signIn(linkToken: string): Promise<void> {
  const r = await api<{ token: string }>("/api/auth/signin", { method: "POST", body: { token: linkToken } });
  setToken(r.token);
}

/// Opens the live event stream with a fresh single-use ticket; reconnects
/// with a new ticket after errors until `stop()` is called.
export function liveEvents(query: string, onEvent: (ev: unknown) => void, onState: (live: boolean) => void): { stop: () => void } {
  let es: EventSource | null = null;
  let stopped = false;
  let timer: number | undefined;
  const connect = async () => {
    if (stopped) return;
    try {
      const { ticket } = await api<{ ticket: string }>("/api/events/ticket", { method: "POST", body: {} });
      if (stopped) return;
      const qs = new URLSearchParams(query);
      qs.set("ticket", ticket);
      es = new EventSource("/api/events/stream?" + qs.toString());
      es.addEventListener("open", () => onState(true));
      es.addEventListener("event", (m) => {
        try {
          onEvent(JSON.parse((m as MessageEvent<string>).data));
        } catch {
          /* ignore malformed frames */
        }
      });
      es.addEventListener("error", () => {
        onState(false);
        es?.close();
        es = null;
        if (!stopped) timer = window.setTimeout(connect, 2000);
      });
    } catch {
      onState(false);
      if (!stopped && token()) timer = window.setTimeout(connect, 5000);
    }
  };
  void connect();
  return {
    stop: () => {
      stopped = true;
      if (timer) window.clearTimeout(timer);
      es?.close();
    },
  };
}

// ---- API shapes ---------------------------------------------------------

export interface EventRow {
  id: number;
  time_ms: number;
  last_time_ms: number;
  type: string;
  server_id: string | null;
  server_name: string | null;
  tool: string | null;
  action: string;
  rule: string | null;
  severity: string;
  reason: string;
  evidence: unknown;
  session: string | null;
  count: number;
}

export interface ServerRow {
  id: string;
  name: string;
  origin: string;
  client: string | null;
  command: string | null;
  mode: string;
  tools: number;
  waiting: number;
  last_seen_ms: number;
}

export interface ToolRow {
  server_id: string;
  server_name: string;
  name: string;
  state: string;
  approved_hash: string | null;
  pending_hash: string | null;
  current_hash: string | null;
  findings: unknown;
  definition: unknown;
  versions: number;
  updated_ms: number | null;
}

export interface DiffSide {
  hash: string;
  first_seen_ms: number;
  definition: unknown;
}

export interface DiffResp {
  server_id: string;
  tool: string;
  state: string;
  from: DiffSide | null;
  to: DiffSide | null;
  findings: unknown;
}

export interface ConsentRow {
  id: number;
  kind: string;
  state: string;
  server_id: string;
  server_name: string;
  command: string | null;
  client: string | null;
  tool: string | null;
  created_ms: number;
  expires_ms: number | null;
  restricted: boolean;
  sensitive_fields: string[];
  decline_only: string | null;
  payload: Record<string, unknown> | null;
}

export interface SessionRow {
  id: string;
  created_ms: number;
  last_seen_ms: number;
  expires_ms: number;
  user_agent: string;
  current: boolean;
}

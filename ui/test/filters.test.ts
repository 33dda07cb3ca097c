import { describe, expect, it } from "vitest";
import { emptyFilters, fromQuery, isEmpty, matches, toApiQuery, toQuery } from "../src/filters";

const NOW = 1_700_000_000_000;

describe("event filters", () => {
  it("round-trips through the URL and drops invalid values", () => {
    const f = fromQuery("server=srv-1&severity=high&action=block&since=24h&tool=read_file&type=x");
    expect(f).toEqual({ server: "srv-1", tool: "read_file", type: "x", severity: "high", action: "block", since: "24h" });
    expect(fromQuery(toQuery(f))).toEqual(f);
    expect(fromQuery("severity=loud&action=explode&since=1y&bogus=1")).toEqual(emptyFilters());
    expect(toQuery(emptyFilters())).toBe("");
    expect(isEmpty(emptyFilters())).toBe(true);
  });

  it("turns since presets into absolute API times", () => {
    const q = new URLSearchParams(toApiQuery(fromQuery("since=1h&action=block"), NOW, { limit: "100" }));
    expect(q.get("since")).toBe(String(NOW - 3_600_000));
    expect(q.get("action")).toBe("block");
    expect(q.get("limit")).toBe("100");
    expect(q.has("server")).toBe(false);
  });

  function check(qs: string, ev: Record<string, unknown>, expected: boolean) {
    expect(matches(fromQuery(qs), { time_ms: NOW, ...ev }, NOW), `${qs} vs ${JSON.stringify(ev)}`).toBe(expected);
  }

  it("matches live events like the server does", () => {
    check("", { severity: "info" }, true);
    check("severity=high", { severity: "critical" }, true);
    check("severity=high", { severity: "high" }, true);
    check("severity=high", { severity: "medium" }, false);
    check("severity=high", { severity: "weird" }, false);
    check("server=a", { server_id: "a" }, true);
    check("server=a", { server_id: "b" }, false);
    check("action=block", { action: "block" }, true);
    check("action=block", { action: "allow" }, false);
    check("tool=t", { tool: null }, false);
    check("type=x", { type: "x" }, true);
    check("since=1h", { time_ms: NOW - 2 * 3_600_000 }, false);
    check("since=1h", { time_ms: NOW - 60_000 }, true);
  });
});

import { describe, expect, it } from "vitest";
import { safeNext } from "../src/next";

const ROUTES = ["/overview", "/events", "/consent"];

describe("sign-in next= route", () => {
  function check(next: string | null, expected: string) {
    expect(safeNext(next, ROUTES), `next=${JSON.stringify(next)}`).toBe(expected);
  }

  it("follows the dashboard's own routes with their query", () => {
    check("/consent", "/consent");
    check("/events?server=a%26b&severity=high&action=block", "/events?server=a%26b&severity=high&action=block");
    check("/events#frag", "/events");
  });

  it("refuses anything that could leave the origin or is not a page", () => {
    check(null, "/overview");
    check("", "/overview");
    check("https://evil.example/consent", "/overview");
    check("//evil.example/consent", "/overview");
    check("/\\evil.example/consent", "/overview");
    check("\\/evil.example", "/overview");
    check("javascript:alert(1)", "/overview");
    check("/signin", "/overview");
    check("/api/events", "/overview");
    check("/consent/../api/vault", "/overview");
    check("/events\n//x", "/overview");
    check("events", "/overview");
  });
});

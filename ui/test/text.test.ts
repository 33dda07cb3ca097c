import { describe, expect, it } from "vitest";
import { countInvisible, revealInvisible, revealed } from "../src/text";

function check(input: string, expected: string) {
  expect(revealed(input), JSON.stringify(input)).toBe(expected);
}

describe("invisible characters", () => {
  it("marks zero-width, bidi, tag and control characters", () => {
    check("read\u200Bfile", "read<U+200B>file");
    check("a\u202Eb\u2066c", "a<U+202E>b<U+2066>c");
    check("\uFEFFx", "<U+FEFF>x");
    check("\u001b[31mred", "<U+001B>[31mred");
    check("tag\u{E0041}", "tag<U+E0041>");
    check("soft\u00ADhyphen", "soft<U+00AD>hyphen");
  });

  it("leaves ordinary text, newlines, tabs and non-Latin scripts alone", () => {
    check("line1\nline2\tx", "line1\nline2\tx");
    check("Привет 你好 🎉", "Привет 你好 🎉");
    check("<script>alert(1)</script>", "<script>alert(1)</script>");
    expect(countInvisible("plain")).toBe(0);
  });

  it("splits into segments", () => {
    expect(revealInvisible("a\u200Bb")).toEqual([
      { text: "a", invisible: false },
      { text: "<U+200B>", invisible: true },
      { text: "b", invisible: false },
    ]);
  });
});

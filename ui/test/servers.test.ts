import { describe, expect, it } from "vitest";
import { serverLabel } from "../src/pages/secrets";

describe("serverLabel", () => {
  const row = { origin: "protect", mode: "normal", tools: 0, waiting: 0, last_seen_ms: 0 };
  it("tells two servers of one name apart", () => {
    const user = serverLabel({ ...row, id: "srv_a", name: "github", client: "cursor", command: "npx -y @modelcontextprotocol/server-github" });
    const project = serverLabel({ ...row, id: "srv_b", name: "github", client: "vscode", command: "node ./tools/gh.js" });
    expect(user).toBe("github via cursor (npx -y @modelcontextprotocol/server-github) [srv_a]");
    expect(project).not.toBe(user);
  });
  it("reveals invisible characters in a look-alike name", () => {
    expect(serverLabel({ ...row, id: "srv_c", name: "github\u200b", client: null, command: null })).toBe("github<U+200B> [srv_c]");
  });
});

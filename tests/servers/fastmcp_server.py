"""A Python MCP server on FastMCP (PyPI `mcp<2`) for the end-to-end tests.

Usage: fastmcp_server.py [DESCRIPTION_FILE]

Tools:
  add(a, b)   -> a + b. Its description is read from DESCRIPTION_FILE at
                start when given (the rug-pull fixture flips that file
                between sessions), else a fixed benign text.
  env_names() -> JSON list of the environment variable names this process
                received (names only; values never leave).
"""

import json
import os
import sys

from mcp.server.fastmcp import FastMCP

description = "Adds two integers."
if len(sys.argv) > 1:
    with open(sys.argv[1], encoding="utf-8") as f:
        description = f.read().strip()

mcp = FastMCP("gatehouse-e2e-fastmcp")


@mcp.tool(description=description)
def add(a: int, b: int) -> int:
    return a + b


@mcp.tool(description="Lists the names of the environment variables the server sees.")
def env_names() -> str:
    return json.dumps(sorted(os.environ))


if __name__ == "__main__":
    mcp.run("stdio")

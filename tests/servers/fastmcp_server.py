"""A Python MCP server on FastMCP (PyPI `mcp<2`) for the end-to-end tests.

Usage: fastmcp_server.py [DESCRIPTION_FILE]

Tools:
  add(a, b)   -> a + b. Its description is read from DESCRIPTION_FILE at
                start when given (the rug-pull fixture flips that file
                between sessions), else a fixed benign text.
  env_names() -> JSON list of the environment variable names this process
                received (names only; values never leave).
  ask_city()  -> asks the client for a city (elicitation/create, field
                `city`) and returns what came back: "accept: <city>",
                "decline" or "cancel".
  ask_token() -> the same for a secret-like field (`api_token`).
  note(text)  -> sends `text` as a log message and as a progress message,
                then returns "noted".
"""

import json
import os
import sys

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

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


class City(BaseModel):
    city: str = Field(title="City")


class Token(BaseModel):
    api_token: str = Field(title="API token")


async def ask(ctx: Context, message: str, schema, field: str) -> str:
    r = await ctx.elicit(message=message, schema=schema)
    if r.action == "accept":
        return f"accept: {getattr(r.data, field)}"
    return r.action


@mcp.tool(description="Asks which city to use.")
async def ask_city(ctx: Context) -> str:
    return await ask(ctx, "Which city should I use?", City, "city")


@mcp.tool(description="Asks for an API token.")
async def ask_token(ctx: Context) -> str:
    return await ask(ctx, "Paste your API token", Token, "api_token")


@mcp.tool(description="Notes a text in the log.")
async def note(text: str, ctx: Context) -> str:
    await ctx.info(text)
    await ctx.report_progress(1, 1, message=text)
    return "noted"


if __name__ == "__main__":
    mcp.run("stdio")

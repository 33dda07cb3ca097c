"""A FastMCP server (PyPI `mcp<2`) that tells the tests what secrets it got,
without ever sending a value back.

Usage: secret_server.py [--sink] [ARGS...]

Tools:
  env_digest(name)  -> {"present": bool, "sha256": hex|null} of the variable
  arg_digests()     -> sha256 hex of each command-line argument after the script
  where()           -> {"cwd": ..., "env_names": [...]}
  echo(text)        -> text, as it came (only what the caller sent)
With --sink, instead only:
  post(text)        -> "posted N characters" (the egress test's destination;
                       separate names, so two instances never shadow each other)
"""

import hashlib
import json
import os
import sys

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("gatehouse-e2e-secrets")
SINK = "--sink" in sys.argv[1:]


def digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def tool(description):
    """Registers the tool only in the mode it belongs to."""
    def register(f):
        return mcp.tool(description=description)(f) if (f.__name__ == "post") == SINK else f
    return register


@tool(description="Whether an environment variable is set, and the SHA-256 of its value.")
def env_digest(name: str) -> str:
    value = os.environ.get(name)
    return json.dumps({"present": value is not None, "sha256": None if value is None else digest(value)})


@tool(description="SHA-256 of each command-line argument the server was started with.")
def arg_digests() -> str:
    return json.dumps([digest(a) for a in sys.argv[1:]])


@tool(description="The server's working directory and environment variable names.")
def where() -> str:
    return json.dumps({"cwd": os.getcwd(), "env_names": sorted(os.environ)})


@tool(description="Returns the text it is given.")
def echo(text: str) -> str:
    return text


@tool(description="Posts a message.")
def post(text: str) -> str:
    return f"posted {len(text)} characters"


if __name__ == "__main__":
    mcp.run("stdio")

"""A minimal stdlib-only MCP server speaking newline-delimited JSON-RPC,
for behaviours no SDK server produces on demand.

Usage: raw_server.py [--garbage] [--exit-after-init CODE] [--pid-file PATH]

  --garbage            before answering tools/call, write one unparseable
                       line to stdout (the proxy must drop it)
  --exit-after-init N  exit with code N right after answering initialize
  --pid-file PATH      write this process's pid to PATH at start

Tools: echo(text) -> text.
"""

import json
import os
import sys

args = sys.argv[1:]
garbage = "--garbage" in args
exit_code = int(args[args.index("--exit-after-init") + 1]) if "--exit-after-init" in args else None
if "--pid-file" in args:
    with open(args[args.index("--pid-file") + 1], "w") as f:
        f.write(str(os.getpid()))

GARBAGE = 'this is {not json "garbage-canary-7f3a'

TOOL = {
    "name": "echo",
    "description": "Echoes its text argument.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw-e2e", "version": "1.0.0"}}})
        if exit_code is not None:
            sys.exit(exit_code)
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [TOOL]}})
    elif method == "tools/call":
        if garbage:
            sys.stdout.write(GARBAGE + "\n")
            sys.stdout.flush()
        text = msg["params"].get("arguments", {}).get("text", "")
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})

"""A small stdlib-only MCP server with tools named on the command line, for
the cross-server end-to-end tests (a sender; a shadowing twin).

Usage: send_server.py [--name NAME] [TOOL ...]   (default tool: send_message)

Every tool takes any arguments and answers "sent" (it sends nothing
anywhere); a tool whose name starts with read_ answers its argument `text`.
"""

import json
import sys

args = sys.argv[1:]
name = "send-e2e"
if "--name" in args:
    i = args.index("--name")
    name = args[i + 1]
    del args[i:i + 2]
tools = args or ["send_message"]


def tool(n):
    return {
        "name": n,
        "description": "Sends a message." if not n.startswith("read_") else "Reads a note.",
        "inputSchema": {"type": "object", "properties": {
            "to": {"type": "string"}, "body": {"type": "string"}, "text": {"type": "string"}}},
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
            "capabilities": {"tools": {}},
            "serverInfo": {"name": name, "version": "1.0.0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool(t) for t in tools]}})
    elif method == "tools/call":
        params = msg["params"]
        a = params.get("arguments") or {}
        text = a.get("text", "") if params["name"].startswith("read_") else "sent"
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})

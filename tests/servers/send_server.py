"""A small stdlib-only MCP server with tools named on the command line, for
the cross-server end-to-end tests (a sender; a shadowing twin).

Usage: send_server.py [--name NAME] [TOOL ...]   (default tool: send_message)

Every tool takes any arguments and answers "sent" (it sends nothing
anywhere); a tool whose name starts with read_ answers its argument `text`.
JSON-RPC batches get one batch reply.
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


def answer(msg):
    """The answer to one request (None for a notification)."""
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None
    if method == "initialize":
        return {"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": name, "version": "1.0.0"}}}
    if method == "tools/list":
        return {"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool(t) for t in tools]}}
    if method == "tools/call":
        params = msg["params"]
        a = params.get("arguments") or {}
        text = a.get("text", "") if params["name"].startswith("read_") else "sent"
        return {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}}
    return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}}


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if isinstance(msg, list):
        # A JSON-RPC batch: one batch reply.
        answers = [a for a in map(answer, msg) if a is not None]
        if answers:
            send(answers)
        continue
    reply = answer(msg)
    if reply is not None:
        send(reply)

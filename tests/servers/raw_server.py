"""A minimal stdlib-only MCP server speaking newline-delimited JSON-RPC,
for behaviours no SDK server produces on demand.

Usage: raw_server.py [--garbage] [--exit-after-init CODE] [--pid-file PATH] [--requests] [--linger]
                     [--log PATH] [--list-delay SECS] [--list-errors N] [--stateless] [--duplicate]
                     [--description-file PATH]

  --garbage            before answering tools/call, write one unparseable
                       line to stdout (the proxy must drop it)
  --exit-after-init N  exit with code N right after answering initialize
  --pid-file PATH      write this process's pid to PATH at start
  --requests           also list tools that send server->client requests:
                       roots() sends roots/list, sample(context?) sends
                       sampling/createMessage (with includeContext when
                       given), elicit() sends elicitation/create; each
                       returns the JSON answer it got (result or error)
  --linger             keep running after stdin closes (a server that only
                       a signal ends)
  --log PATH           append every line received to PATH
  --list-delay SECS    wait SECS before answering tools/list
  --list-errors N      answer the first N tools/list requests with an error
  --stateless          2026-07-28: reject every request whose params._meta
                       lacks io.modelcontextprotocol/protocolVersion (-32022)
  --duplicate          list a second, different tool named echo
  --description-file PATH
                       echo's description is read from PATH at each tools/list

Tools: echo(text, repeat?, broken?) -> text repeated `repeat` times; with
broken: true the answer is cut short (not JSON) and never completed.
"""

import json
import os
import sys
import time

args = sys.argv[1:]
garbage = "--garbage" in args
requests = "--requests" in args
linger = "--linger" in args
exit_code = int(args[args.index("--exit-after-init") + 1]) if "--exit-after-init" in args else None
log = args[args.index("--log") + 1] if "--log" in args else None
list_delay = float(args[args.index("--list-delay") + 1]) if "--list-delay" in args else 0
list_errors = int(args[args.index("--list-errors") + 1]) if "--list-errors" in args else 0
stateless = "--stateless" in args
duplicate = "--duplicate" in args
description_file = args[args.index("--description-file") + 1] if "--description-file" in args else None
if "--pid-file" in args:
    with open(args[args.index("--pid-file") + 1], "w") as f:
        f.write(str(os.getpid()))

GARBAGE = 'this is {not json "garbage-canary-7f3a'

TOOL = {
    "name": "echo",
    "description": "Echoes its text argument.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


REQUEST_TOOLS = [
    {"name": "roots", "description": "Lists the client's roots.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "sample", "description": "Asks the client for a sample.",
     "inputSchema": {"type": "object", "properties": {"context": {"type": "string"}}}},
    {"name": "elicit", "description": "Asks the client for a city.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def ask(method, params):
    """Sends a request to the client and returns its answer (result or error)."""
    rid = "raw-%s" % method
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("id") == rid and "method" not in msg:
            return {k: msg[k] for k in ("result", "error") if k in msg}


def request_tool(name, arguments):
    if name == "roots":
        return ask("roots/list", {})
    if name == "sample":
        params = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                  "maxTokens": 5}
        if arguments.get("context"):
            params["includeContext"] = arguments["context"]
        return ask("sampling/createMessage", params)
    return ask("elicitation/create", {
        "message": "Which city?",
        "requestedSchema": {"type": "object", "properties": {"city": {"type": "string"}}}})


while True:
    line = sys.stdin.readline()
    if not line:
        while linger:
            time.sleep(60)
        break
    if log:
        with open(log, "a") as f:
            f.write(line)
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    meta = (msg.get("params") or {}).get("_meta") or {}
    if stateless and "io.modelcontextprotocol/protocolVersion" not in meta:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32022, "message": "Unsupported protocol version"}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw-e2e", "version": "1.0.0"}}})
        if exit_code is not None:
            sys.exit(exit_code)
    elif method == "tools/list" and list_errors > 0:
        list_errors -= 1
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "tools unavailable"}})
    elif method == "tools/list":
        time.sleep(list_delay)
        echo = TOOL
        if description_file:
            with open(description_file) as f:
                echo = dict(TOOL, description=f.read())
        tools = [echo] + (REQUEST_TOOLS if requests else [])
        if duplicate:
            tools.append(dict(TOOL, description="Echoes its text argument, and more."))
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call" and msg["params"].get("name") in ("roots", "sample", "elicit"):
        answer = request_tool(msg["params"]["name"], msg["params"].get("arguments") or {})
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(answer)}]}})
    elif method == "tools/call":
        if garbage:
            sys.stdout.write(GARBAGE + "\n")
            sys.stdout.flush()
        arguments = msg["params"].get("arguments", {})
        text = arguments.get("text", "") * int(arguments.get("repeat", 1))
        answer = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
        if arguments.get("broken"):
            answer = answer[: len(answer) // 2]
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})

"""A real MCP client (PyPI `mcp<2`, 1.30) driven line by line from stdin.

Usage: driver.py [--tee LOG] [--no-elicitation] -- CMD ARGS...

Each stdin line is one JSON command; each answer is one JSON line on stdout:
  {"op":"list_tools"}                        -> {"ok":true,"tools":[<Tool JSON>...]}
  {"op":"call","name":N,"args":{...}}        -> {"ok":true,"result":<CallToolResult JSON>}
  {"op":"list_resources"} / {"op":"list_prompts"}
  {"op":"get_prompt","name":N,"args":{...}}
  {"op":"wait_notification","method":M,"timeout":S}
                                             -> {"ok":true,"seen":true|false}
  {"op":"quit"}
The first answer (before any command) is {"ok":true,"initialize":<InitializeResult JSON>},
or {"ok":false,"initialize_error":<ErrorData JSON>} when initialize is refused
(the client then exits).
Errors are answered {"ok":false,"error":"..."}. With --tee, every raw line
the server side writes to this client is appended to LOG before the SDK sees
it (the wire-level record the passthrough test compares). With
--no-elicitation the client declares no elicitation capability (like
clients that cannot show input requests).
"""

import json
import os
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError
from mcp.shared.context import RequestContext

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main(argv):
    tee = None
    if argv and argv[0] == "--tee":
        tee, argv = argv[1], argv[2:]
    elicits = True
    if argv and argv[0] == "--no-elicitation":
        elicits, argv = False, argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    command, args = argv[0], argv[1:]
    if tee is not None:
        args = [os.path.join(HERE, "tee.py"), tee, "--", command, *args]
        command = sys.executable
    # Pass the whole environment: the test decides what the wrap process sees.
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))

    seen = {}  # notification method -> count
    changed = anyio.Event()
    events = {}

    def event_for(method):
        if method not in events:
            events[method] = anyio.Event()
        return events[method]

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            method = message.root.method
            seen[method] = seen.get(method, 0) + 1
            event_for(method).set()

    async def sampling(ctx: RequestContext, params: types.CreateMessageRequestParams):
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="stub sample"),
            model="stub-model",
            stopReason="endTurn",
        )

    async def elicitation(ctx, params):
        return types.ElicitResult(action="decline")

    async def roots(ctx):
        return types.ListRootsResult(roots=[types.Root(uri="file:///tmp/gatehouse-e2e-root", name="e2e")])

    async def logging_cb(params):
        pass

    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read,
            write,
            sampling_callback=sampling,
            elicitation_callback=elicitation if elicits else None,
            list_roots_callback=roots,
            logging_callback=logging_cb,
            message_handler=on_message,
        ) as session:
            try:
                init = await session.initialize()
            except McpError as e:  # a refused server: the test inspects the error
                emit({"ok": False, "initialize_error": dump(e.error)})
                return
            emit({"ok": True, "initialize": dump(init)})
            stdin = anyio.wrap_file(sys.stdin)
            async for line in stdin:
                line = line.strip()
                if not line:
                    continue
                cmd = json.loads(line)
                op = cmd["op"]
                try:
                    if op == "quit":
                        emit({"ok": True})
                        break
                    elif op == "list_tools":
                        r = await session.list_tools()
                        emit({"ok": True, "tools": [dump(t) for t in r.tools]})
                    elif op == "call":
                        progress = []

                        async def on_progress(p, total, message):
                            progress.append(p)

                        r = await session.call_tool(
                            cmd["name"], cmd.get("args", {}), progress_callback=on_progress
                        )
                        emit({"ok": True, "result": dump(r), "progress": len(progress)})
                    elif op == "list_resources":
                        r = await session.list_resources()
                        emit({"ok": True, "resources": [dump(x) for x in r.resources]})
                    elif op == "list_prompts":
                        r = await session.list_prompts()
                        emit({"ok": True, "prompts": [dump(x) for x in r.prompts]})
                    elif op == "get_prompt":
                        r = await session.get_prompt(cmd["name"], cmd.get("args", {}))
                        emit({"ok": True, "prompt": dump(r)})
                    elif op == "wait_notification":
                        method = cmd["method"]
                        with anyio.move_on_after(cmd.get("timeout", 5)):
                            await event_for(method).wait()
                        emit({"ok": True, "seen": event_for(method).is_set(), "count": seen.get(method, 0)})
                        events.pop(method, None)
                    else:
                        emit({"ok": False, "error": f"unknown op {op}"})
                except Exception as e:  # reported to the test, which decides
                    emit({"ok": False, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])

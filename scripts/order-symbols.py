#!/usr/bin/env python3
"""Writes crates/gatehouse-cli/wrap-symbols.txt: every function the release
`gatehouse wrap` runs, for the linker to lay out together
(crates/gatehouse-cli/build.rs). It runs wrap under callgrind twice, without
a policy file and with a typical one: start-up, a listing, 300 calls of
1 KB, idle (pollers, the members' refresh, maintenance, the idle trim),
shutdown. The functions of a call come first (those idling runs too
first), then the rest of what idling runs, then the rest (start-up and
shutdown): the idle trim drops the code's pages, and what the pollers map
back is then two runs of pages, not pages strewn among a call's and
start-up's.

Run it after a compiler update (the build warns), a dependency update or
changes that rename or add much of the call path's code, then rebuild:
    scripts/order-symbols.py          needs valgrind; builds what it runs
    scripts/order-symbols.py --check  how much of the list the release binary has
Names are the linker's (mangled, so they carry hashes of the compiler's
version and of each crate's); one the build does not have is skipped, so a
stale list costs memory, never correctness.
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gatehouse-target"))
OUT = os.path.join(ROOT, "crates/gatehouse-cli/wrap-symbols.txt")
CALLS = 300
# Past both steps of the idle trim (the code's 30-32 s after the last frame)
# and the members' 5 s refreshes.
IDLE_SECS = 36
# A policy with what most have: a denylist, an argument rule, pinning and a
# cross-server rule (parsed at start, its rules judged on every call).
POLICY = """
mode = "enforce"

[tool_policy]
mode = "denylist"
blocked_tools = ["execute_command", "run_shell"]

[[rules]]
id = "no-credentials"
tool_name = "*"
argument_patterns = ["**/.ssh/**", "**/.aws/**"]
decision = "block"
reason = "credential directories are off limits"

[pinning]
on_change = "block"

[cross_server.read_then_send]
mode = "linked"
"""


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=TARGET)
    for args in (["-p", "gatehouse-cli"], ["-p", "gatehouse-proxy", "--example", "echo_peer"]):
        subprocess.run(["cargo", "build", "--release", *args], cwd=ROOT, env=env, check=True)
    return os.path.join(TARGET, "release/gatehouse"), os.path.join(TARGET, "release/examples/echo_peer")


def drive(gatehouse, peer, profile, home):
    """Runs wrap under callgrind; `profile` gets four parts: `.1` start-up,
    `.2` the calls, `.3` idle, and the file itself shutdown."""
    env = dict(os.environ, GATEHOUSE_HOME=home, HOME=home)
    argv = ["valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=no",
            "--compress-pos=no", f"--callgrind-out-file={profile}",
            gatehouse, "wrap", "--server", "echo", "--", peer]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)

    def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    def answer(request_id):
        while True:
            line = proc.stdout.readline()
            if not line:
                sys.exit("gatehouse wrap ended before answering")
            if json.loads(line).get("id") == request_id:
                return

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "order-symbols", "version": "0"}}})
    answer(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer(1)
    dump = ["callgrind_control", "--dump", str(proc.pid)]
    subprocess.run(dump, check=True, capture_output=True)
    for i in range(2, 2 + CALLS):
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
              "params": {"name": "echo", "arguments": {"payload": "x" * 1000}}})
        answer(i)
    subprocess.run(dump, check=True, capture_output=True)
    # Idle past the pollers' periods and the maintenance run's start.
    time.sleep(IDLE_SECS)
    subprocess.run(dump, check=True, capture_output=True)
    proc.stdin.close()
    proc.wait()


def self_costs(profile, binary):
    """Instructions each function of `binary` ran itself (callgrind's
    uncompressed format: a cost line after `calls=` is the callee's)."""
    costs = collections.Counter()
    fn, in_binary, callee_line = None, False, False
    for line in open(profile, errors="replace"):
        if line.startswith("ob="):
            in_binary = os.path.realpath(line[3:].strip()) == os.path.realpath(binary)
        elif line.startswith("fn="):
            fn = line[3:].strip().removesuffix("'2")
        elif line.startswith("calls="):
            callee_line = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if callee_line:
                callee_line = False
            elif in_binary and fn:
                fields = line.split()
                costs[fn] += int(fields[1]) if len(fields) > 1 else 0
    return costs


def check():
    """How many listed names the release binary defines."""
    gatehouse = os.path.join(TARGET, "release/gatehouse")
    symbols = subprocess.run(["nm", "--defined-only", gatehouse], capture_output=True,
                             text=True, check=True).stdout
    defined = {line.split()[-1] for line in symbols.splitlines()}
    listed = open(OUT).read().splitlines()[1:]
    found = sum(name in defined for name in listed)
    print(f"{found} of {len(listed)} listed functions are in {gatehouse}")
    return found * 10 >= len(listed) * 9


def main():
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if check() else 1)
    gatehouse, peer = build()
    calls, idle, rest = collections.Counter(), collections.Counter(), collections.Counter()
    # Without a policy file (the defaults) and with a typical one.
    for policy in (None, POLICY):
        with tempfile.TemporaryDirectory() as tmp:
            if policy:
                with open(os.path.join(tmp, "policy.toml"), "w") as file:
                    file.write(policy)
            profile = os.path.join(tmp, "callgrind", "out")
            os.mkdir(os.path.dirname(profile))
            drive(gatehouse, peer, profile, tmp)
            calls += self_costs(f"{profile}.2", gatehouse)
            idle += self_costs(f"{profile}.3", gatehouse)
            rest += self_costs(f"{profile}.1", gatehouse) + self_costs(profile, gatehouse)
    # What both calls and idling run first, so that idling maps back two
    # runs of pages (this one and its own), not pages all over a call's.
    hot = [name for name, _ in calls.most_common()]
    names = [name for name in hot if name in idle]
    names += [name for name in hot if name not in idle]
    names += [name for name, _ in idle.most_common() if name not in calls]
    names += [name for name, _ in rest.most_common() if name not in calls and name not in idle]
    # Linker names only (callgrind also reports addresses and "(below main)").
    names = [name for name in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$.]*", name)]
    rustc = subprocess.run(["rustc", "-V"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    with open(OUT, "w") as out:
        out.write(f"# {rustc}\n")
        out.writelines(name + "\n" for name in names)
    print(f"{len(names)} functions -> {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()

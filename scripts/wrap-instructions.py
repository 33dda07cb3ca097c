#!/usr/bin/env python3
"""Instructions (callgrind, all threads) a release `gatehouse wrap` spends
per 1 KB call, with the echo peer and the bench's policy (burst and rate
limit off): a run of 1,200 calls minus a run of 200, divided by 1,000, so
start-up cancels out (exit-time writes of the call window, which grow with
the calls, do not). Counts move by a few percent between runs (thread
wake-ups differ): run each build twice, in turn. Needs valgrind.

    scripts/wrap-instructions.py               builds and measures this tree
    scripts/wrap-instructions.py GH [GH ...]   measures these binaries
    PAYLOAD=prose scripts/wrap-instructions.py 1,000 bytes of prose instead of `x` × 1,000
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/gatehouse-target"))
POLICY = "[cross_server.burst]\nenabled = false\n[cross_server.rate_limit]\nenabled = false\n"
FEW, MANY = 200, 1200
# The scanner's loop (`scripts/scan-instructions.sh`) uses the same two.
PROSE = ("The deploy of build 4f3a9c2e71 finished at 14:02; the staging database was "
         "migrated and three alerts were cleared by the on-call. ")
PAYLOADS = {"x": "x" * 1000, "prose": (PROSE * 8)[:1000]}


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=TARGET)
    for args in (["-p", "gatehouse-cli"], ["-p", "gatehouse-proxy", "--example", "echo_peer"]):
        subprocess.run(["cargo", "build", "--release", *args], cwd=ROOT, env=env, check=True)


def total(gatehouse, peer, calls):
    with tempfile.TemporaryDirectory() as home:
        with open(os.path.join(home, "policy.toml"), "w") as f:
            f.write(POLICY)
        out = os.path.join(home, "callgrind.out")
        wrap = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
             gatehouse, "wrap", "--server", "bench", "--home", home, "--", peer],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=dict(os.environ, GATEHOUSE_HOME=home))

        def ask(line):
            wrap.stdin.write(line.encode() + b"\n")
            wrap.stdin.flush()
            return wrap.stdout.readline()

        ask('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            '"capabilities":{},"clientInfo":{"name":"instructions","version":"0"}}}')
        wrap.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        ask('{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
        payload = PAYLOADS[os.environ.get("PAYLOAD", "x")]
        for i in range(calls):
            ask('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                '"arguments":{"payload":"%s"}}}' % (i + 2, payload))
        wrap.stdin.close()
        wrap.wait()
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise SystemExit("no callgrind totals")


def main():
    peer = os.path.join(TARGET, "release/examples/echo_peer")
    binaries = sys.argv[1:]
    if not binaries:
        build()
        binaries = [os.path.join(TARGET, "release/gatehouse")]
    for gatehouse in binaries:
        per_call = (total(gatehouse, peer, MANY) - total(gatehouse, peer, FEW)) / (MANY - FEW)
        print(f"{gatehouse}: {per_call / 1000:.1f}k instructions per call")


if __name__ == "__main__":
    main()

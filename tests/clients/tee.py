"""Wire recorder: tee.py LOG -- CMD ARGS...

Runs CMD with this process's stdin/stderr, copies CMD's stdout to ours line
by line and appends each line verbatim to LOG. Exits with CMD's code.
"""

import subprocess
import sys


def main():
    log_path = sys.argv[1]
    assert sys.argv[2] == "--"
    child = subprocess.Popen(sys.argv[3:], stdin=sys.stdin, stdout=subprocess.PIPE)
    with open(log_path, "ab") as log:
        for line in child.stdout:
            log.write(line)
            log.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()

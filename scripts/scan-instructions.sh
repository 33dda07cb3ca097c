#!/usr/bin/env bash
# Instructions per `scan_result` of a 1 KB result (`x` × 1,000 and prose),
# under callgrind: the loop run at 2,000 and at 4,000 scans, the difference
# divided, so start-up and warm-up cancel out. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gatehouse-target}"
bin=$(cargo test --release -p gatehouse-scanner --test scan_loop --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
out=$(mktemp -d)
total() { # label scans
  ONLY=$1 N=$2 valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" --ignored --test-threads=1 >/dev/null 2>&1
  grep -h '^summary\|^totals' "$out/cg" | head -1 | awk '{print $2}'
}
for label in x prose; do
  a=$(total "$label" 2000)
  b=$(total "$label" 4000)
  # 4,000 − 2,000 scans, plus 40 more warm-up scans
  echo "$label: $(( (b - a) / 2040 )) instructions per scan"
done
rm -rf "$out"

#!/usr/bin/env bash
# Builds Gatehouse (dashboard assets when Node is available, then the release
# binary) and starts the control plane: prints `Dashboard: <sign-in URL>`.
# Works without a display. Extra arguments go to `gatehouse up`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gatehouse-target}"
if command -v npm >/dev/null; then
  [ -d node_modules ] || npm install --no-audit --no-fund --loglevel=error >&2
  npm run build >&2
fi
cargo build --release -p gatehouse-cli >&2
exec "$CARGO_TARGET_DIR/release/gatehouse" up "$@"

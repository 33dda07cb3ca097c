#!/usr/bin/env bash
# Tests of the tray app (the root package `gatehouse-app`), all three layers:
#   1. plain unit tests + tauri::test MockRuntime command tests (no display)
#   2. end-to-end: the real binary under Xvfb with a private D-Bus session,
#      driven by tauri-driver + WebKitWebDriver; the test plays the tray host
#      and the notification daemon. Screenshots: artifacts/screenshots/.
# Installs nothing. Prerequisites (the lead's test command installs them):
#   apt: see docs/tray.md (libwebkit2gtk-4.1-dev … xvfb xauth webkit2gtk-driver dbus)
#   cargo install tauri-driver --locked
# Usage: scripts/tray-e2e.sh [--unit-only|--e2e-only]
set -euo pipefail
cd "$(dirname "$0")/.."

# same profile as the rest of the suite, so the shared target dir is reused
mode="${1:-all}"

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "tray-e2e: missing '$1' — $2" >&2; exit 2; }
}

if [ "$mode" != "--e2e-only" ]; then
  cargo test -p gatehouse-app --lib
fi
[ "$mode" = "--unit-only" ] && exit 0

need xvfb-run "apt-get install xvfb xauth"
need dbus-run-session "apt-get install dbus dbus-daemon"
need WebKitWebDriver "apt-get install webkit2gtk-driver"
need tauri-driver "cargo install tauri-driver --locked"

# build outside the time limit; the test runs the binary cargo built
cargo build -p gatehouse-app --bin gatehouse-app
# protected entries run the CLI beside the app (through the stable launcher)
cargo build -p gatehouse-cli --bin gatehouse
cargo test -p gatehouse-app --test tray_e2e --no-run
mkdir -p artifacts/screenshots

# NO_AT_BRIDGE: no accessibility bus activation noise; the private session bus
# ends with the run, so nothing D-Bus-activated outlives it.
timeout 600 xvfb-run -a -s "-screen 0 1280x800x24" \
  dbus-run-session -- env GATEHOUSE_TRAY_E2E=1 NO_AT_BRIDGE=1 \
  cargo test -p gatehouse-app --test tray_e2e -- --nocapture

target_dir="${CARGO_TARGET_DIR:-target}"
if pgrep -f "$target_dir/debug/gatehouse-app" >/dev/null; then
  echo "tray-e2e: a gatehouse-app process was left behind" >&2
  pgrep -af "$target_dir/debug/gatehouse-app" >&2
  exit 1
fi
ls -l artifacts/screenshots/tray-*.png
echo "tray-e2e: ok"

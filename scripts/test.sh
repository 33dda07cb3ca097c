#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs what the tests need
# when missing (Debian packages, npm packages, MCP peers, tauri-driver), then
# runs formatting and lint checks, the Rust tests (with a real Secret Service),
# the dashboard's unit tests and browser suites (headless Debian Chromium),
# and the tray app's build, tests and end-to-end run under Xvfb.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gatehouse-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
step() { printf '\n==> %s\n' "$*" >&2; }

step "system packages"
PKGS=(build-essential pkg-config libssl-dev libdbus-1-dev file xdg-utils
      libwebkit2gtk-4.1-dev libjavascriptcoregtk-4.1-dev libsoup-3.0-dev libgtk-3-dev
      libayatana-appindicator3-dev librsvg2-dev xvfb xauth xdotool imagemagick webkit2gtk-driver
      dbus dbus-daemon gnome-keyring libsecret-tools chromium sqlite3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

step "MCP peers (npm, PyPI)"
scripts/install-peers.sh >/dev/null

step "dashboard: npm ci, build, unit tests"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund --loglevel=error
fi
npm run build
npm test

step "cargo fmt, clippy"
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings

# The browser suites run inside `cargo test`: crates/gatehouse-server/tests/browser.rs
# (seeded database) and tests/e2e/dashboard.rs (the gatehouse binary, real wraps).
# They need chromium (above), node_modules and ui/dist (built above, before
# cargo embeds it); GATEHOUSE_E2E=1 makes a missing prerequisite a failure.
export GATEHOUSE_E2E=1
export GATEHOUSE_E2E_ARTIFACTS="${GATEHOUSE_E2E_ARTIFACTS:-$CARGO_TARGET_DIR/e2e-artifacts}"

step "cargo test (default members, browser suites included) with a real Secret Service"
KR=$(mktemp -d)
trap 'rm -rf "$KR"' EXIT
dbus-run-session -- bash -euo pipefail -c '
  export XDG_DATA_HOME="'"$KR"'/data" XDG_RUNTIME_DIR="'"$KR"'/run"
  mkdir -p -m 700 "$XDG_DATA_HOME" "$XDG_RUNTIME_DIR"
  printf %s ci-pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null
  KEYRING_IT=1 cargo test
'

# The tray app (root package `gatehouse-app`) is not a default member, so the
# steps above never compile Tauri; build, lint and test it here.
step "tray app: clippy, build, unit + tauri::test MockRuntime tests"
cargo clippy -p gatehouse-app --all-targets -- -D warnings
cargo build -p gatehouse-app
cargo test -p gatehouse-app

step "tray app: end-to-end under Xvfb (tauri-driver + WebKitWebDriver)"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v tauri-driver >/dev/null 2>&1; then
  # built in the shared target dir (cached), installed into ~/.cargo/bin
  cargo install tauri-driver --version '^2' --locked
fi
scripts/tray-e2e.sh --e2e-only

step "tray app: Linux .deb bundle (tauri CLI from npm), contents checked"
scripts/check-deb.sh

step "all tests passed (screenshots: $GATEHOUSE_E2E_ARTIFACTS)"

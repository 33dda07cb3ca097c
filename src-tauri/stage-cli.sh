#!/bin/sh
# beforeBundleCommand of tauri.conf.json: builds the `gatehouse` CLI with the
# same profile as the app and stages it where the Linux bundles pick it up
# (/usr/bin/gatehouse beside /usr/bin/gatehouse-app), so that the stable
# launcher finds it next to the app binary.
set -eu
cd "$(dirname "$0")/.."
if [ "${TAURI_ENV_DEBUG:-false}" = "true" ]; then
  cargo build -p gatehouse-cli --bin gatehouse
  profile=debug
else
  cargo build -p gatehouse-cli --bin gatehouse --release
  profile=release
fi
mkdir -p src-tauri/bundle-bin
cp "${CARGO_TARGET_DIR:-target}/$profile/gatehouse" src-tauri/bundle-bin/gatehouse

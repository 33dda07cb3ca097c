#!/usr/bin/env bash
# Builds the Linux .deb of the tray app (debug profile: the same code the
# tests ran, without a second release build) and checks what a person would
# install: both binaries, the desktop entry, icons, dependencies and the
# prerm note; then runs the packaged CLI from an extracted copy.
# The AppImage is not built here: its bundler downloads linuxdeploy from
# GitHub, which this machine cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
npx --no-install tauri build --debug --bundles deb -- -p gatehouse-app
deb="$(ls -t "$target"/debug/bundle/deb/*.deb | head -1)"
listing="$(dpkg-deb -c "$deb")"
for want in usr/bin/gatehouse-app usr/bin/gatehouse usr/share/applications/Gatehouse.desktop \
            usr/share/icons/hicolor/128x128/apps/gatehouse-app.png; do
  grep -qE " \.?/?$want$" <<<"$listing" || { echo "check-deb: $deb lacks $want" >&2; exit 1; }
done
depends="$(dpkg-deb -f "$deb" Depends)"
for want in libwebkit2gtk-4.1-0 libgtk-3-0 libayatana-appindicator3-1; do
  grep -q "$want" <<<"$depends" || { echo "check-deb: Depends lacks $want: $depends" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -e "$deb" "$tmp/DEBIAN"
grep -q "gatehouse unprotect --all" "$tmp/DEBIAN/prerm" || { echo "check-deb: no prerm note" >&2; exit 1; }
dpkg-deb -x "$deb" "$tmp/root"
grep -q '^Exec=gatehouse-app' "$tmp/root/usr/share/applications/Gatehouse.desktop" \
  || { echo "check-deb: desktop entry does not start gatehouse-app" >&2; exit 1; }
"$tmp/root/usr/bin/gatehouse" --version
echo "check-deb: ok ($deb)"

#!/usr/bin/env bash
# Regenerates every icon under icons/ from vector drawings (ImageMagick 6/7 +
# python3 for the .icns container). The outputs are committed; nothing at build
# or run time calls this script.
#   app icon : a shield with a gate arch, bundle sizes + .ico + .icns
#   tray     : 32x32 RGBA, one per state: protected (green), paused (grey),
#              attention (amber) with a count badge 1..9 and "9+"
set -euo pipefail
cd "$(dirname "$0")"
IM=$(command -v magick || command -v convert)
FONT=${FONT:-DejaVu-Sans-Bold}

# shield(size, fill, out): shield outline with a dark gate arch, RGBA.
shield() {
  local s=$1 fill=$2 out=$3
  "$IM" -size 512x512 xc:none \
    -fill "$fill" -stroke '#0f172a' -strokewidth 18 \
    -draw "path 'M 256 28 L 460 100 L 460 250 C 460 370 370 450 256 490 C 142 450 52 370 52 250 L 52 100 Z'" \
    -fill '#0f172a' -stroke none \
    -draw "path 'M 176 400 L 176 250 C 176 180 336 180 336 250 L 336 400 L 296 400 L 296 260 C 296 225 216 225 216 260 L 216 400 Z'" \
    -resize "${s}x${s}" -define png:color-type=6 "PNG32:$out"
}

# app icon set used by the bundler (tauri.conf.json > bundle.icon)
shield 512 '#22c55e' icon.png
for s in 32 128; do shield "$s" '#22c55e' "${s}x${s}.png"; done
shield 256 '#22c55e' '128x128@2x.png'
for s in 16 24 32 48 64 256; do shield "$s" '#22c55e' "/tmp/gh-ico-$s.png"; done
"$IM" /tmp/gh-ico-{16,24,32,48,64,256}.png icon.ico
shield 16 '#22c55e' /tmp/gh-icns-16.png
shield 64 '#22c55e' /tmp/gh-icns-64.png
shield 1024 '#22c55e' /tmp/gh-icns-1024.png
python3 - <<'PY'
import struct
# ICNS: 'icns' + u32 total length, then (OSType, u32 length incl. 8-byte header, PNG bytes)
entries = [(b'icp4', '/tmp/gh-icns-16.png'), (b'icp5', '32x32.png'), (b'icp6', '/tmp/gh-icns-64.png'),
           (b'ic07', '128x128.png'), (b'ic08', '128x128@2x.png'), (b'ic09', 'icon.png'),
           (b'ic10', '/tmp/gh-icns-1024.png')]
body = b''
for kind, path in entries:
    data = open(path, 'rb').read()
    body += kind + struct.pack('>I', len(data) + 8) + data
open('icon.icns', 'wb').write(b'icns' + struct.pack('>I', len(body) + 8) + body)
PY
rm -f /tmp/gh-ico-*.png /tmp/gh-icns-*.png

# tray states
shield 32 '#22c55e' tray/protected.png
shield 32 '#94a3b8' tray/paused.png
shield 32 '#f59e0b' tray/attention.png
for n in 1 2 3 4 5 6 7 8 9 9+; do
  label=$n; file=$n; [ "$n" = "9+" ] && file=9plus
  pt=150; [ "$n" = "9+" ] && pt=120
  "$IM" -size 512x512 xc:none \
    -fill '#f59e0b' -stroke '#0f172a' -strokewidth 18 \
    -draw "path 'M 256 28 L 460 100 L 460 250 C 460 370 370 450 256 490 C 142 450 52 370 52 250 L 52 100 Z'" \
    -fill '#dc2626' -stroke white -strokewidth 16 -draw "circle 372 372 372 236" \
    -fill white -stroke none -font "$FONT" -pointsize $((pt * 2)) -gravity center \
    -annotate "+116+116" "$label" \
    -resize 32x32 -define png:color-type=6 "PNG32:tray/attention-$file.png"
done
echo "icons regenerated"

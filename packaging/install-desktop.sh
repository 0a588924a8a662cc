#!/usr/bin/env bash
# Put SpecChat in the current user's application menu (Linux, freedesktop desktops).
#
#     packaging/install-desktop.sh [--binary PATH] [--copy] [--uninstall]
#
# Installs resources/org.specchat.SpecChat.desktop into ~/.local/share/applications with Exec
# pointing at the built app (default: dist/SpecChat/SpecChat of this checkout), and the icon into
# the user's hicolor theme (every PNG size and the SVG). --copy first copies the whole bundle to
# ~/.local/opt/SpecChat, so a rebuild or a deleted checkout does not break the launcher.
# Nothing needs root; --uninstall removes all of it again. Honours XDG_DATA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
APP_ID=org.specchat.SpecChat
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
OPT=$HOME/.local/opt/SpecChat
BINARY=$ROOT/dist/SpecChat/SpecChat
COPY=0 UNINSTALL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --copy) COPY=1; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install-desktop.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

refresh() {  # menu and icon caches, where the desktop has the tools
  if command -v update-desktop-database >/dev/null; then
    update-desktop-database -q "$DATA/applications" || true
  fi
  if command -v gtk-update-icon-cache >/dev/null && [ -f "$DATA/icons/hicolor/index.theme" ]; then
    gtk-update-icon-cache -q -t -f "$DATA/icons/hicolor" || true
  fi
}

if [ "$UNINSTALL" = 1 ]; then
  rm -f "$DATA/applications/$APP_ID.desktop"
  find "$DATA/icons/hicolor" -name "$APP_ID.*" -delete 2>/dev/null || true
  rm -rf "$OPT"
  refresh
  echo "removed the SpecChat launcher, icons and $OPT"
  exit 0
fi

[ -x "$BINARY" ] || { echo "install-desktop.sh: $BINARY not found; build it first: packaging/build.sh" >&2; exit 2; }
if [ "$COPY" = 1 ]; then
  bundle=$(dirname "$BINARY")
  mkdir -p "$(dirname "$OPT")"
  rm -rf "$OPT.new" && cp -a "$bundle" "$OPT.new" && rm -rf "$OPT" && mv "$OPT.new" "$OPT"
  BINARY=$OPT/$(basename "$BINARY")
fi

for dir in "$ROOT"/resources/icons/hicolor/*/apps; do
  size=$(basename "$(dirname "$dir")")
  mkdir -p "$DATA/icons/hicolor/$size/apps"
  cp "$dir/$APP_ID".* "$DATA/icons/hicolor/$size/apps/"
done

mkdir -p "$DATA/applications"
target="$DATA/applications/$APP_ID.desktop"
# Exec and TryExec point at the binary (quoted as the Desktop Entry spec wants for spaces).
escaped=$(printf '%s' "$BINARY" | sed -e 's/[\\"`$]/\\\\&/g')
sed -e "s|^Exec=.*|Exec=\"$escaped\"|" -e "s|^TryExec=.*|TryExec=$BINARY|" \
  "$ROOT/resources/$APP_ID.desktop" > "$target.tmp"
mv "$target.tmp" "$target"
chmod 644 "$target"
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$target" | grep -v "hint:" || true
fi
refresh
echo "installed $target -> $BINARY"
echo "installed icons under $DATA/icons/hicolor (16x16 ... 512x512, scalable)"

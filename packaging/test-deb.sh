#!/usr/bin/env bash
# Install the .deb as a user would, check that the installed app starts, and remove it.
#
#     bash packaging/test-deb.sh [--clean-root] [--vulkan] [--model SMALL.gguf] [DEB]
#
# Default: on this machine (root, Debian): `apt-get install ./DEB`, then the installed app's
# self-test (load a model, generate through the speculative engine, open the window, get a reply)
# offscreen with /usr/bin/specchat, and under Xvfb (the xcb platform, as on a desktop) with the
# command the menu entry runs; then `apt-get purge` and a check that nothing is left.
#
# --clean-root: the same inside a fresh minimal Debian (debootstrap --variant=minbase, no X or GL
# libraries, no fonts), so apt must bring in every dependency the package declares. The Xvfb server
# runs outside and the chroot reaches it through /tmp/.X11-unix. Needs debootstrap and ~1 min of
# downloads from the Debian mirror.
#
# --vulkan: DEB is `specchat-vulkan` (build-deb.sh --vulkan); after the checks above, the installed
# app must list llama.cpp's Vulkan device and its self-test must put the model's layers on it. Without a
# GPU that device is Mesa's llvmpipe (mesa-vulkan-drivers, which the package recommends), which
# llama.cpp skips unless GGML_VK_VISIBLE_DEVICES names it.
#
# Prints the install time and the time from launch to the window on screen (first start).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT_DIR=$PWD
CLEAN=0 VULKAN=0 MODEL=${SPECCHAT_SELFTEST_MODEL:-} DEB=""
while [ $# -gt 0 ]; do
  case "$1" in
    --clean-root) CLEAN=1; shift ;;
    --vulkan) VULKAN=1; shift ;;
    --model) MODEL=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "test-deb.sh: unknown option $1" >&2; exit 2 ;;
    *) DEB=$1; shift ;;
  esac
done
[ -n "$DEB" ] || DEB=$(ls -t dist/specchat$([ "$VULKAN" = 1 ] && echo -vulkan)_*.deb 2>/dev/null | head -1)
[ -f "$DEB" ] || { echo "test-deb.sh: no .deb; run packaging/build-deb.sh first" >&2; exit 2; }
PKG=$(dpkg-deb -f "$DEB" Package)
[ "$(id -u)" = 0 ] || { echo "test-deb.sh: installs a package, so it must run as root" >&2; exit 2; }
if [ -z "$MODEL" ]; then
  PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
  MODEL=$("$PY" -c "from app.cli.selftest import find_model; print(find_model() or '')")
fi
[ -f "$MODEL" ] || { echo "test-deb.sh: no small model for the self-test; pass --model GGUF" >&2; exit 2; }
need=""
command -v Xvfb >/dev/null || need="$need xvfb"
command -v xauth >/dev/null || need="$need xauth"
[ "$CLEAN" = 1 ] && ! command -v debootstrap >/dev/null && need="$need debootstrap"
# shellcheck disable=SC2086 # one word per package
[ -z "$need" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null; }

# An X server for the xcb runs, on a display number nothing else uses.
display=:$(( 90 + RANDOM % 9 ))
Xvfb "$display" -screen 0 1280x1024x24 -nolisten tcp >/dev/null 2>&1 &
xvfb_pid=$!
CHROOT=""
cleanup() {
  kill "$xvfb_pid" 2>/dev/null || true
  if [ -n "$CHROOT" ]; then
    for m in tmp/.X11-unix dev/pts dev proc; do umount -l "$CHROOT/$m" 2>/dev/null || true; done
    rm -rf "$CHROOT"
  fi
}
trap cleanup EXIT
sleep 1

# in_target CMD...: run in the machine under test (this one, or the chroot).
in_target() {
  if [ -n "$CHROOT" ]; then chroot "$CHROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
  else env -u PYTHONPATH -u VIRTUAL_ENV -u LD_LIBRARY_PATH "$@"; fi
}
deb_in_target=$ROOT_DIR/$DEB model_in_target=$MODEL
if [ "$CLEAN" = 1 ]; then
  CHROOT=$(mktemp -d /tmp/specchat-deb-root.XXXXXX)
  echo "==> debootstrap: a minimal Debian $(. /etc/os-release; echo "$VERSION_CODENAME") in $CHROOT"
  t=$(date +%s)
  debootstrap --variant=minbase "$(. /etc/os-release; echo "$VERSION_CODENAME")" "$CHROOT" \
    http://deb.debian.org/debian >/dev/null
  echo "    $(( $(date +%s) - t )) s"
  mount -t proc proc "$CHROOT/proc"
  mount --bind /dev "$CHROOT/dev"
  mount --bind /dev/pts "$CHROOT/dev/pts"
  mkdir -p "$CHROOT/tmp/.X11-unix"
  mount --bind /tmp/.X11-unix "$CHROOT/tmp/.X11-unix"
  cp "$DEB" "$CHROOT/tmp/" && deb_in_target=/tmp/$(basename "$DEB")
  cp "$MODEL" "$CHROOT/tmp/" && model_in_target=/tmp/$(basename "$MODEL")
  for lib in libEGL.so.1 libxcb.so.1 libxkbcommon.so.0; do
    if in_target sh -c "ls /usr/lib/*/$lib /lib/*/$lib" >/dev/null 2>&1; then
      echo "test-deb.sh: the fresh root already has $lib; it cannot show that apt brings it" >&2; exit 1
    fi
  done
  in_target apt-get update -qq
fi

echo "==> apt-get install $deb_in_target"
packages_before=$(in_target dpkg-query -W -f '.\n' | wc -l)
t=$(date +%s)
in_target env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb_in_target" >/dev/null
install_s=$(( $(date +%s) - t ))
echo "    installed in $install_s s, with $(( $(in_target dpkg-query -W -f '.\n' | wc -l) - packages_before - 1 )) dependencies"
in_target dpkg -s "$PKG" | grep -E '^(Version|Installed-Size):'

echo "==> self-test of the installed app, offscreen (/usr/bin/specchat)"
in_target env QT_QPA_PLATFORM=offscreen /usr/bin/specchat --self-test --model "$model_in_target"

desktop=/usr/share/applications/org.specchat.SpecChat.desktop
exec_cmd=$(in_target sed -n 's/^Exec=//p' "$desktop")
echo "==> self-test under Xvfb (xcb) through the menu entry's command: $exec_cmd"
in_target env DISPLAY="$display" QT_QPA_PLATFORM=xcb "$exec_cmd" --self-test --model "$model_in_target"

echo "==> first start, launch to window on screen (Xvfb)"
in_target env DISPLAY="$display" QT_QPA_PLATFORM=xcb SPECCHAT_STARTUP_PROBE_QUIT=window \
  XDG_CONFIG_HOME=/tmp/specchat-probe-config XDG_DATA_HOME=/tmp/specchat-probe-data \
  "$exec_cmd" --startup-probe

if [ "$VULKAN" = 1 ]; then
  echo "==> the Vulkan backend: llama.cpp's devices, and the self-test's layers on the Vulkan device"
  doctor=$(in_target env GGML_VK_VISIBLE_DEVICES=0 /usr/bin/specchat doctor --json)
  printf '%s' "$doctor" | python3 -c '
import json, sys
d = json.load(sys.stdin)
vk = [x for x in d["devices"] if x["name"].startswith("Vulkan")]
print("    backends:", ", ".join(d["backends"]), "| Vulkan devices:", "; ".join(x["name"] + " " + x["description"] for x in vk) or "none")
sys.exit(0 if "Vulkan" in d["backends"] and vk else 1)' \
    || { echo "test-deb.sh: the installed package lists no Vulkan device" >&2; exit 1; }
  line=$(in_target env GGML_VK_VISIBLE_DEVICES=0 QT_QPA_PLATFORM=offscreen /usr/bin/specchat --self-test --no-gui \
         --model "$model_in_target" | grep 'self-test OK' || true)
  echo "    ${line:0:400}"
  printf '%s' "$line" | grep -q 'GPU backends: Vulkan' && printf '%s' "$line" | grep -Eq 'layers [0-9]+/[0-9]+ on Vulkan0' \
    || { echo "test-deb.sh: the self-test did not run on the Vulkan device" >&2; exit 1; }
fi

echo "==> apt-get purge $PKG"
in_target env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$PKG" >/dev/null
left=$(in_target sh -c 'ls -d /opt/specchat /usr/bin/specchat /usr/bin/specchat-gui '"$desktop"' \
  /usr/share/metainfo/org.specchat.SpecChat.metainfo.xml 2>/dev/null || true')
[ -z "$left" ] || { echo "test-deb.sh: left behind after purge: $left" >&2; exit 1; }
echo "==> $PKG installed, started (offscreen and xcb) and uninstalled cleanly (install $install_s s)"

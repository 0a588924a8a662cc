#!/usr/bin/env bash
# The bundle's self-test on emulated older x86-64 CPUs: proves that what we ship needs no instruction
# the build machine has and a user's desktop may lack (AVX-512 on most desktops, AVX2 on older ones).
#
#     bash packaging/qemu_selftest.sh [--bundle dist/SpecChat] [--model SMALL.gguf] [--no-gui] [CPU=EXPECT ...]
#
# Default CPUs: Haswell (AVX2, no AVX-512: most desktops and laptops) must get llama.cpp's `haswell`
# CPU module, Nehalem (SSE4.2, no AVX at all) the `sse42` one, both through the whole self-test: the
# engine, then the window getting a reply through its worker thread (offscreen; --no-gui: the engine
# only). A native (-march=native) build dies here with SIGILL (exit 132) the moment llama.cpp loads. The
# reported variant also proves that the run was emulated: this machine's own CPU would pick another.
# Conroe (Core 2: SSSE3, no SSE4.1/4.2, POPCNT) is below x86-64-v2, which NumPy and Qt need: EXPECT
# `refused` means the bundle must say so and exit 5 (app/cpu_floor.py), never die with SIGILL.
#
# PyInstaller's bootloader starts its second stage by exec'ing itself, and qemu-user does not follow an
# exec (the child would run natively and prove nothing), so the second stage is started directly, with
# the environment the first stage gives it (seen with strace: _PYI_ARCHIVE_FILE, _PYI_PARENT_PROCESS_LEVEL
# =-1, _PYI_LINUX_PROCESS_NAME, LD_LIBRARY_PATH=_internal). Needs qemu-user (`apt-get install qemu-user`).
# Measured 2026-12-07 on 2 cores: Haswell 27 s, Nehalem 21 s with the window, Conroe 1 s.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=dist/SpecChat MODEL=${SPECCHAT_SELFTEST_MODEL:-} GUI=1
CPUS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --no-gui) GUI=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *=*) CPUS+=("$1"); shift ;;
    *) echo "qemu_selftest.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#CPUS[@]} -gt 0 ] || CPUS=(Haswell=haswell Nehalem=sse42 Conroe=refused)
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "qemu_selftest.sh: only for x86-64 Linux bundles; skipped"; exit 0 ;;
esac
QEMU=$(command -v qemu-x86_64 || true)
[ -n "$QEMU" ] || { echo "qemu_selftest.sh: qemu-x86_64 is missing: apt-get install qemu-user" >&2; exit 2; }
exe=$(cd "$BUNDLE" && pwd)/SpecChat
[ -x "$exe" ] || { echo "qemu_selftest.sh: no bundle at $BUNDLE (run packaging/build.sh)" >&2; exit 2; }
if [ -z "$MODEL" ]; then
  MODEL=$(.venv/bin/python -c "from app.cli.selftest import find_model; print(find_model() or '')" 2>/dev/null || true)
fi
[ -f "$MODEL" ] || { echo "qemu_selftest.sh: no model for the self-test (--model SMALL.gguf)" >&2; exit 2; }

failed=0
for pair in "${CPUS[@]}"; do
  cpu=${pair%%=*} want=${pair#*=}
  start=$(date +%s)
  set +e
  out=$(env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV QT_QPA_PLATFORM=offscreen \
        _PYI_ARCHIVE_FILE="$exe" _PYI_PARENT_PROCESS_LEVEL=-1 _PYI_LINUX_PROCESS_NAME=SpecChat \
        LD_LIBRARY_PATH="$(dirname "$exe")/_internal" \
        "$QEMU" -cpu "$cpu" "$exe" --self-test $([ "$GUI" = 1 ] || echo --no-gui) -n "${QEMU_SELFTEST_TOKENS:-2}" \
        --model "$MODEL" 2>&1)
  code=$?
  set -e
  took=$(( $(date +%s) - start ))
  if [ "$want" = refused ]; then
    line=$(printf '%s\n' "$out" | grep -m1 'cannot run on this processor' || true)
    if [ "$code" -ne 5 ] || [ -z "$line" ]; then
      echo "qemu -cpu $cpu: expected the bundle to refuse this CPU with exit 5 and a message, got exit $code$([ "$code" = 132 ] && echo ' (SIGILL)'):" >&2
      printf '%s\n' "$out" | grep -v "TCG doesn't support" | tail -15 >&2
      failed=1
    else
      echo "qemu -cpu $cpu (${took} s): refused, as it should be: $line"
    fi
    continue
  fi
  line=$(printf '%s\n' "$out" | grep -m1 'self-test OK' || true)
  gui=$(printf '%s\n' "$out" | grep -m1 'gui self-test OK' || true)
  if [ "$code" -ne 0 ] || [ -z "$line" ] || { [ "$GUI" = 1 ] && [ -z "$gui" ]; }; then
    echo "qemu -cpu $cpu: the bundle's self-test FAILED (exit $code$([ "$code" = 132 ] && echo ': SIGILL, an instruction this CPU lacks'), ${took} s):" >&2
    printf '%s\n' "$out" | grep -v "TCG doesn't support" | tail -15 >&2
    failed=1
  elif ! printf '%s\n' "$line" | grep -q "CPU variant $want\b"; then
    echo "qemu -cpu $cpu: expected llama.cpp's $want CPU module, got: $line" >&2
    failed=1
  else
    echo "qemu -cpu $cpu (${took} s): ${line:0:160}..."
    [ -z "$gui" ] || echo "    ${gui:0:160}..."
  fi
done
exit $failed

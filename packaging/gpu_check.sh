#!/usr/bin/env bash
# SpecChat's GPU check: one command for a lent NVIDIA machine with no network, and its dry run.
#
#     bash packaging/gpu_check.sh --out DIR            # on the GPU machine (CUDA): ~3 min, 6 at most
#     bash packaging/gpu_check.sh --dry-run --out DIR  # here or in CI: the same check on the CPU build
#
# Writes DIR/report.json and DIR/report.md (fields and plan: docs/GPU.md). The GPU run needs what
# `bash packaging/gpu_kit/prepare.sh` puts in packaging/gpu_kit/carry/ on a machine with a network
# (the CUDA wheel, three pure-Python wheels the GPU image lacks, the demo pair's GGUF headers), and
# the device tool's `carry: ["packaging/gpu_kit/carry"]`. It installs nothing from a network: the
# wheels go to a scratch folder, cuBLAS and the CUDA runtime come from the machine's own packages.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out="" dry=0 rehearse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    # The GPU path's set-up (carried wheels only, the machine's python3, its CUDA libraries) with the
    # dry run's sizes on whatever device there is: a rehearsal on a CPU machine before a window.
    --rehearse) rehearse=--dry-run; export GPU_CHECK_BUDGET_S=1500 GPU_CHECK_TIMEOUT_S=1600
      shift ;;
    *) echo "usage: gpu_check.sh [--dry-run | --rehearse] --out DIR" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "usage: gpu_check.sh [--dry-run] --out DIR" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
kit=packaging/gpu_kit
carry=${GPU_KIT_CARRY:-$kit/carry}  # another folder only for a rehearsal with another wheel
start=$(date +%s)

if [ "$dry" = 1 ]; then
  py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  export GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-1200}
  set +e
  PYTHONUNBUFFERED=1 "$py" "$kit/check.py" --dry-run --out "$out"
  rc=$?
  echo "==> dry run finished in $(( $(date +%s) - start )) s: $out/report.json"
  exit $rc
fi

# --- the GPU machine ---------------------------------------------------------------------------
source "$kit/gpu_env.sh"
set +e
# The phases stop starting at 420 s and the whole check is killed at 480 s; the last phase (llama.cpp's
# tools against SpecChat) takes what is left, so a run that ends early leaves a rerun room in the
# 15-minute device window with the machine's start-up (docs/GPU.md).
PYTHONUNBUFFERED=1 timeout -k 10 "${GPU_CHECK_TIMEOUT_S:-480}" python3 "$kit/check.py" $rehearse --out "$out" --headers "$carry/headers" --native "$carry/native" \
  --budget-s "${GPU_CHECK_BUDGET_S:-420}" 2>&1 | tee "$out/check.log"
rc=${PIPESTATUS[0]}
echo "==> GPU check finished in $(( $(date +%s) - start )) s (exit $rc): $out/report.json"
exit $rc

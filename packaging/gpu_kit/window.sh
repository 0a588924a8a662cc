#!/usr/bin/env bash
# The second GPU window's experiments in one device call (docs/GPU.md, "Next GPU window"):
#
#     bash packaging/gpu_kit/window.sh --out DIR            # on the GPU machine: ~4 min, 8.5 at most
#     bash packaging/gpu_kit/window.sh --dry-run --out DIR  # here: the same scripts on the CPU build
#
# 1. the synthetic models (check.py's first two phases);
# 2. draft_anatomy.py: where the draft model's ~2.7 ms per one-row pass goes (1.15 ms timed alone);
# 3. step_trace.py: per-step pass times, default against SpecParams.steady_shapes;
# 4. nan_hunt.py: the synthetic 7B's activations, tensor by tensor (NaN logits on CUDA in run 26);
# 5. native_pairs.py --steady-shapes: `specchat bench --native` with steady shapes, against llama.cpp.
# Each step has its own time limit, so a slow one leaves the next its share. The steps write into a
# scratch folder, packed at the end into DIR/window.tar.gz beside DIR/window.log: the device tool
# returns at most 8 files from $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out="" dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "usage: window.sh [--dry-run] --out DIR" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "usage: window.sh [--dry-run] --out DIR" >&2; exit 2; }
mkdir -p "$out"
final=$(cd "$out" && pwd)
out=${WINDOW_WORK:-/tmp/specchat-window}
rm -rf "$out" && mkdir -p "$out"
pack() { tar -czf "$final/window.tar.gz" -C "$out" . && echo "==> packed: $final/window.tar.gz"; }
trap pack EXIT
exec > >(tee "$final/window.log") 2>&1
kit=packaging/gpu_kit
carry=${GPU_KIT_CARRY:-$kit/carry}
models=${GPU_CHECK_MODELS:-/tmp/specchat-gpu-kit}
start=$(date +%s)

if [ "$dry" = 1 ]; then
  py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  dry_flag=--dry-run suffix=-dry
else
  source "$kit/gpu_env.sh"
  py=python3 dry_flag="" suffix=""
fi
export PYTHONUNBUFFERED=1 GPU_CHECK_MODELS=$models

failed=""
step() {  # step NAME LIMIT_S COMMAND...: run it under its limit, note a failure, go on
  local name=$1 limit=$2
  shift 2
  echo "==> $name (limit ${limit} s, $(( $(date +%s) - start )) s so far)"
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1 || failed="$failed $name"
  tail -12 "$out/$name.log"
}

# The limits add up to 500 s with the set-up's ~15: the device call's timeout_s=540 leaves a margin.
step models 60 "$py" "$kit/check.py" $dry_flag --phases environment,synthesize --out "$out/check" \
  --headers "$carry/headers"
step anatomy 120 "$py" "$kit/draft_anatomy.py" $dry_flag --models "$models" --out "$out/anatomy.json"
step trace 100 "$py" "$kit/step_trace.py" $dry_flag --models "$models" --out "$out/trace.json"
# Since synth format 4 the weights are zero-mean and activations stay near 100 on the CPU: is the 7B finite on CUDA?
step nan 40 "$py" "$kit/nan_hunt.py" --model "$models/target-7b$suffix.gguf" --model "$models/target-1.5b$suffix.gguf" \
  --out "$out/nan.json"
export GPU_KIT_NATIVE=${GPU_KIT_NATIVE:-$carry/native}
if [ -x "$GPU_KIT_NATIVE/llama-completion" ]; then
  # Two pairs; native_pairs gives each at most 150 s, and the bench JSONs are written pair by pair.
  step native-steady 180 "$py" "$kit/native_pairs.py" "$out" "$models" $suffix --steady-shapes
else
  echo "==> native-steady: skipped, no llama.cpp tools in $GPU_KIT_NATIVE (prepare.sh with LLAMA_TOOLS=DIR)"
fi
echo "==> window finished in $(( $(date +%s) - start )) s; failed:${failed:- none}"
[ -z "$failed" ]

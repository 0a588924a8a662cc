"""Which tensor of a forward pass first holds a non-finite value, and how large the activations get.

Run 26's synthetic 7B gave NaN logits on CUDA and finite ones on the CPU (max |logit| 130). The likely
cause is a value past float16's range (65504) where CUDA's kernels convert activations to f16 (cuBLAS
GEMMs, the f16 KV cache); this pass-by-pass check says where. It evaluates one prompt and one more token
with llama.cpp's eval callback on every node, and records each f32 tensor's largest |value| and its count
of non-finite values.

    python packaging/gpu_kit/nan_hunt.py --model FILE --out FILE [--no-flash-attn]

The kit's own tool (as device_costs.py measures with the app's contexts): the callback needs
llama_context_params.cb_eval, which the app's contexts never set.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import llama_cpp  # noqa: E402
from device_costs import prompt_tokens  # noqa: E402
from native_compare import wheel_lib_dir  # noqa: E402

from app.llama_backend import LlamaModel, ModelConfig  # noqa: E402

F16_MAX = 65504.0
GGML_TYPE_F32 = 0


def _ggml() -> ctypes.CDLL:
    # The soname file: a slimmed wheel (packaging/slim_wheel.py) keeps no bare libggml-base.so.
    names = sorted(wheel_lib_dir().glob("libggml-base.so*"), key=lambda p: (p.name != "libggml-base.so.0", p.name))
    lib = ctypes.CDLL(str(names[0]))
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.restype = None
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    return lib


class Recorder:
    """The eval callback: every node is asked for; f32 results are read back and summarised."""

    def __init__(self) -> None:
        self.lib = _ggml()
        self.rows: list[dict] = []
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def _on_node(self, tensor: int, ask: bool, _user: int) -> bool:
        if ask:
            return True
        if ctypes.c_int.from_address(tensor).value != GGML_TYPE_F32:  # ggml_tensor starts with its type
            return True
        n = self.lib.ggml_nbytes(tensor)
        data = np.empty(n // 4, dtype=np.float32)
        self.lib.ggml_backend_tensor_get(tensor, data.ctypes.data, 0, n)
        finite = np.isfinite(data)
        bad = int(data.size - finite.sum())
        top = float(np.abs(data[finite]).max()) if finite.any() else float("nan")
        self.rows.append({"name": self.lib.ggml_get_name(tensor).decode(), "max_abs": top, "non_finite": bad})
        return True


def hunt(model_path: Path, flash_attn: bool, prefix: int = 64) -> dict:
    model = LlamaModel(ModelConfig(model_path, n_gpu_layers=-1))
    recorder = Recorder()
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 512, 512, 512
    params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                              else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    params.cb_eval = recorder.callback
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    if not ctx:
        raise RuntimeError(f"no context for {model_path}")
    report: dict = {"model": model_path.name, "flash_attn": flash_attn}
    try:
        tokens = prompt_tokens(prefix + 1, seed=2)
        for name, chunk, start in (("prompt", tokens[:prefix], 0), ("one_token", tokens[prefix:], prefix)):
            recorder.rows = []
            batch = llama_cpp.llama_batch_init(len(chunk), 0, 1)
            try:
                for i, token in enumerate(chunk):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = i == len(chunk) - 1
                batch.n_tokens = len(chunk)
                rc = llama_cpp.llama_decode(ctx, batch)
                llama_cpp.llama_synchronize(ctx)
            finally:
                llama_cpp.llama_batch_free(batch)
            rows = recorder.rows
            first_bad = next((r for r in rows if r["non_finite"]), None)
            report[name] = {
                "rc": rc, "tensors": len(rows), "first_non_finite": first_bad,
                "max_abs": max((r["max_abs"] for r in rows if r["max_abs"] == r["max_abs"]), default=None),
                "over_f16": [r for r in rows if r["max_abs"] > F16_MAX][:20],
                "largest": sorted(rows, key=lambda r: -r["max_abs"] if r["max_abs"] == r["max_abs"] else 0)[:12],
                "per_layer_out": [r for r in rows if r["name"].startswith("l_out-")],
            }
    finally:
        llama_cpp.llama_free(ctx)
        model.close()
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, action="append", help="may be given more than once")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-flash-attn", action="store_true")
    args = parser.parse_args(argv)
    report = [hunt(path, not args.no_flash_attn) for path in args.model]
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for r in report:
        for name in ("prompt", "one_token"):
            p = r[name]
            print(f"{r['model']} {name}: {p['tensors']} f32 tensors, max |x| {p['max_abs']}, over f16: "
                  f"{[o['name'] for o in p['over_f16']]}, first non-finite: {p['first_non_finite']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

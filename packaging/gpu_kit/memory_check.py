"""SpecChat's memory prediction against llama.cpp's own buffer report, over contexts and offloads.

Each setting loads the model and one context as the engine does (n_batch 512, n_outputs_max 32),
reads llama.cpp's "... buffer size = N MiB" lines and, where NVML is present, this process's total
on the GPU; the prediction is the app's (`app.memory`), with the compute buffers from llama.cpp's
allocation dry run on GPU builds as the app takes them, and the closed form beside it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from app.engine.memory_plan import ENGINE_OUTPUTS_MAX, compute_source
from app.llama_backend import devices as llama_devices
from app.memory import BuildSpec, ModelPrediction, ModelSettings, predict_model
from app.memory.predict import RUNTIME_OVERHEAD
from app.models.gguf_meta import read_gguf

MiB = 1 << 20
LIMIT = 0.05  # the bound, on every buffer over 1 MiB and on the total


def _with_compute(p: ModelPrediction, compute: list) -> ModelPrediction:
    return replace(p, buffers=tuple(b for b in p.buffers if b.kind != "compute") + tuple(compute))


def _by_key(items: list, kinds_from: str = "kind") -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = defaultdict(int)
    for b in items:
        kind = getattr(b, kinds_from)
        if kind == "overhead":
            continue
        out[(kind.replace("repack", "model"), b.device)] += b.bytes
    return out


def check_one(name: str, path: Path, n_ctx: int, ngl: int, flash_attn: bool, build: BuildSpec) -> dict:
    info = read_gguf(path)
    settings = ModelSettings(n_gpu_layers=ngl, n_ctx=n_ctx, flash_attn=flash_attn, n_batch=512, n_ubatch=512,
                             n_outputs_max=ENGINE_OUTPUTS_MAX, n_outputs=1)
    closed = predict_model(info, settings, build, name)
    source = compute_source(build)
    predicted = _with_compute(closed, list(source(info, settings))) if source else closed
    measured = llama_devices.measure_model(path, n_ctx=predicted.n_ctx, n_gpu_layers=ngl, flash_attn=flash_attn,
                                           n_batch=512, n_ubatch=512, n_outputs_max=ENGINE_OUTPUTS_MAX, role=name)
    pred, closed_kv, meas = _by_key(list(predicted.buffers)), _by_key(list(closed.buffers)), _by_key(measured)
    buffers = []
    worst = 0.0
    for key in sorted(set(pred) | set(meas)):
        p, m = pred.get(key, 0), meas.get(key, 0)
        err = abs(p - m) / m if m else (0.0 if not p else 1.0)
        if max(p, m) > MiB:
            worst = max(worst, err)
        buffers.append({"kind": key[0], "device": key[1], "predicted_bytes": p, "reported_bytes": m,
                        "closed_form_bytes": closed_kv.get(key, 0), "error_pct": round(100 * err, 3)})
    total_p, total_m = sum(pred.values()), sum(meas.values())
    nvml = [b for b in measured if b.kind == "overhead"]
    entry = {
        "model": name, "n_ctx": predicted.n_ctx, "n_gpu_layers": ngl, "flash_attn": flash_attn,
        "gpu_layers": predicted.placement.gpu_repeating_layers,
        "predicted_bytes": total_p, "reported_bytes": total_m,
        "closed_form_bytes": sum(closed_kv.values()),
        "error_pct": round(100 * abs(total_p - total_m) / total_m, 3) if total_m else None,
        "worst_buffer_error_pct": round(100 * worst, 3),
        "within_5pct": worst <= LIMIT and (not total_m or abs(total_p - total_m) <= LIMIT * total_m),
        "buffers": buffers,
    }
    if nvml:
        ours = {d: sum(v for (k, dev), v in meas.items() if dev == d) for d in {b.device for b in nvml}}
        entry["nvml_process_bytes"] = {b.device: b.bytes + ours.get(b.device, 0) for b in nvml}
        entry["nvml_runtime_overhead_bytes"] = {b.device: b.bytes for b in nvml}
        entry["predicted_runtime_overhead_bytes"] = RUNTIME_OVERHEAD.get(build.runtime, 0)
    return entry


def grid(models: dict[str, Path], contexts: list[int], build: BuildSpec) -> list[dict]:
    """Every model at every context with no, half and full offload, plus flash attention off once."""
    out = []
    for name, path in models.items():
        n_layer = read_gguf(path).n_layer
        for n_ctx in contexts:
            for ngl in (0, n_layer // 2, -1):
                out.append(check_one(name, path, n_ctx, ngl, True, build))
        out.append(check_one(name, path, contexts[len(contexts) // 2], -1, False, build))
    return out

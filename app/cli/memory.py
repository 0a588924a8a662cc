"""`specchat doctor` and `specchat memory`: the build, the devices, and the pair's memory budget."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.memory import (
    DEFAULT_MARGIN,
    GiB,
    MiB,
    ModelPrediction,
    ModelSettings,
    PairPrediction,
    PredictionError,
    budgets,
    fit_pair,
    predict_pair,
)
from app.models.gguf_meta import GGUFError, GGUFInfo, read_gguf


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    doctor = subparsers.add_parser("doctor", help="llama.cpp build capabilities, devices and memory")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument("-m", "--model", action="append", default=[], metavar="GGUF",
                        help="also describe this model: its cache (attention, sliding window, recurrent, hybrid), "
                             "how SpecChat rolls it back, and its MTP head (repeatable)")
    doctor.set_defaults(func=_cmd_doctor)

    mem = subparsers.add_parser("memory", help="predict the memory of a target + draft pair, per device")
    mem.add_argument("-m", "--model", required=True, metavar="TARGET", help="target GGUF")
    mem.add_argument("-md", "--model-draft", metavar="DRAFT", help="draft GGUF")
    mem.add_argument(
        "-ngl",
        "--n-gpu-layers",
        type=int,
        default=-1,
        metavar="N",
        help="target layers on the GPU (-1: all, the default)",
    )
    mem.add_argument(
        "-ngld",
        "--n-gpu-layers-draft",
        type=int,
        default=-1,
        metavar="N",
        help="draft layers on the GPU (-1: all, the default)",
    )
    mem.add_argument(
        "-c", "--ctx-size", type=int, default=4096, metavar="N", help="context size (0: the model's)"
    )
    mem.add_argument(
        "-cd", "--ctx-size-draft", type=int, default=0, metavar="N", help="draft context (0: as -c)"
    )
    mem.add_argument("-b", "--batch-size", type=int, default=512, metavar="N")
    mem.add_argument("-ub", "--ubatch-size", type=int, default=512, metavar="N")
    mem.add_argument("-ctk", "--cache-type-k", default="f16", metavar="TYPE")
    mem.add_argument("-ctv", "--cache-type-v", default="f16", metavar="TYPE")
    mem.add_argument("-fa", "--flash-attn", choices=("on", "off"), default="on")
    mem.add_argument(
        "--draft-max",
        type=int,
        default=16,
        metavar="K",
        help="draft tokens per step: the target's logits buffer grows to K+1 rows",
    )
    mem.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN / GiB,
        metavar="GIB",
        help="free memory to keep on every device (default 1 GiB)",
    )
    mem.add_argument("--fit", action="store_true", help="choose -ngl, -ngld and if needed a smaller context")
    mem.add_argument(
        "--measure",
        action="store_true",
        help="load the models (one at a time) and show llama.cpp's measured buffers beside the prediction",
    )
    mem.add_argument(
        "--model-compute",
        action="store_true",
        help="GPU builds: keep SpecChat's modelled compute buffers instead of llama.cpp's own dry run "
        "(the dry run is exact, allocates nothing and takes about 0.3 s per model)",
    )
    mem.add_argument("--rpc", metavar="HOST:PORT[,HOST:PORT...]", default="",
                     help="llama.cpp RPC servers whose devices join this machine's for the target (the draft "
                     "stays here); each is a device with its own memory budget")
    mem.add_argument("--json", action="store_true", help="print one JSON object")
    mem.set_defaults(func=_cmd_memory)


def _cmd_doctor(args: argparse.Namespace) -> int:
    import psutil

    from app.llama_backend import devices as llama_devices
    from app.llama_backend.gpu_hint import build_choice

    caps = llama_devices.capabilities()
    devices = llama_devices.list_devices()
    vm = psutil.virtual_memory()
    loaded, unused = caps.loaded, caps.unused_gpu
    data = {
        "gpu_offload": caps.gpu_offload,
        "backends": list(caps.backends),
        # A portable build (issue 53) picks its CPU module by this CPU's features at start.
        "backend_dl": bool(loaded and loaded.dynamic),
        "cpu_variant": loaded.cpu_variant if loaded else None,
        "backend_modules": list(loaded.modules) if loaded else [],
        "backends_failed": [{"module": m, "why": why} for m, why in (loaded.failed if loaded else ())],
        # A GPU of this machine that the build cannot drive, and the command that gets a build with it.
        "unused_gpu": None if unused is None else {
            "vendor": unused.gpu.vendor, "evidence": unused.gpu.evidence, "backend": unused.backend,
            "fix": unused.fix, "message": unused.message(),
        },
        "build_choice": build_choice(),
        "cpu_features": sorted(caps.cpu_features),
        "system_info": caps.system_info,
        "llama_cpp_python": _llama_version(),
        "devices": [
            {
                "name": d.name,
                "description": d.description,
                "type": d.type,
                "free_bytes": d.free_bytes,
                "total_bytes": d.total_bytes,
                "device_id": d.device_id,
                "maps_host": d.maps_host,
                "alignment": d.alignment,
                "max_tensor_bytes": d.max_tensor_bytes,
            }
            for d in devices
        ],
        "ram": {"available_bytes": int(vm.available), "total_bytes": int(vm.total)},
        "budget": "gpu" if any(d.type in ("gpu", "igpu") for d in devices) else "ram",
        # Per-process use on NVIDIA GPUs (NVML); null where there is no NVIDIA driver or no nvidia-ml-py.
        "nvml": _nvml_json(),
    }
    models = [_model_report(Path(m)) for m in args.model]
    if models:
        data["models"] = models
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    offload = "supported" if caps.gpu_offload else "not built in"
    print(f"llama-cpp-python {data['llama_cpp_python']}: GPU offload {offload}")
    print(f"backends: {', '.join(caps.backends) or 'none'}")
    if loaded is not None:
        print(f"llama.cpp modules: {loaded.describe()}")
    print(f"CPU features: {' '.join(sorted(caps.cpu_features)) or 'unknown'}")
    print("devices:")
    for d in devices:
        print(
            f"  {d.name:10s} {d.type:5s} {_gib(d.free_bytes)} free of {_gib(d.total_bytes)}  {d.description}"
        )
        if d.max_tensor_bytes:
            print(f"  {'':10s} largest tensor it accepts: {_gib(d.max_tensor_bytes)} (larger weights stay on the CPU)")
    print(f"RAM: {_gib(vm.available)} available of {_gib(vm.total)}")
    if data["nvml"] is None:
        print("NVML: not available (no NVIDIA driver, or nvidia-ml-py not installed: pip install specchat[nvidia])")
    else:
        for g in data["nvml"]:  # type: ignore[attr-defined]
            print(f"NVML GPU {g['index']} {g['name']}: this process uses {_gib(g['used_bytes'])}")
    if unused is not None:
        print(unused.message())
    elif data["budget"] == "ram":
        print("no GPU device: the memory meter budgets system RAM")
    for m in models:
        if m["error"]:
            print(f"model {m['path']}: {m['error']}")
            continue
        head = "; MTP head: --mode mtp drafts with it" if m["mtp_layers"] else "; no MTP head"
        print(f"model {Path(m['path']).name} ({m['architecture']}): {m['cache']}: {m['rollback']}{head}")
    return 1 if any(m["error"] for m in models) else 0


def _model_report(path: Path) -> dict[str, Any]:
    """What `doctor -m` says of one model: its cache kind and rollback, its MTP head, or why it cannot be read."""
    from app.models.cache_kind import cache_kind, mtp_note
    from app.models.gguf_meta import nextn_layers

    try:
        info = read_gguf(path)
    except GGUFError as e:
        return {"path": str(path), "error": str(e)}
    kind = cache_kind(info)
    return {"path": str(path), "error": None, "architecture": info.architecture, "cache": kind.kind,
            "rollback": kind.rollback(), "sliding_window": kind.window or None, "state_snapshots": kind.snapshots,
            "mtp_layers": nextn_layers(info), "mtp_note": mtp_note(info) or None}


def _nvml_json() -> list[dict[str, Any]] | None:
    from dataclasses import asdict

    from app.memory.nvml_usage import process_gpu_memory

    uses = process_gpu_memory()
    return None if uses is None else [asdict(u) for u in uses]


def _llama_version() -> str:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:  # noqa: BLE001 - only informative
        return "unknown"


def _cmd_memory(args: argparse.Namespace) -> int:
    from app.engine import memory_plan
    from app.engine.pair_config import PairConfig
    from app.llama_backend import devices as llama_devices
    from app.llama_backend import rpc

    try:
        target = read_gguf(args.model)
        draft = read_gguf(args.model_draft) if args.model_draft else None
        placing = memory_plan.placing_for(PairConfig(Path(args.model), rpc=rpc.parse_endpoints(args.rpc)))
        build, draft_build = placing.build, placing.draft_build
        device_budgets = budgets(placing.devices)
        margin = int(args.margin * GiB)
        common = ModelSettings(
            n_ctx=args.ctx_size,
            type_k=args.cache_type_k,
            type_v=args.cache_type_v,
            flash_attn=args.flash_attn == "on",
            n_batch=args.batch_size,
            n_ubatch=args.ubatch_size,
        )
        ts = replace(common, n_gpu_layers=args.n_gpu_layers, n_outputs=max(args.draft_max, 0) + 1,
                     devices=placing.target_devices)
        ds = replace(common, n_gpu_layers=args.n_gpu_layers_draft, n_ctx=args.ctx_size_draft or args.ctx_size,
                     devices=placing.draft_devices)
        source = None if args.model_compute else memory_plan.compute_source(build)
        fit = None
        if args.fit:
            fit = fit_pair(target, draft, ts, ds, build, device_budgets, margin, compute_source=source,
                           draft_build=draft_build)
            pair = fit.prediction
        else:
            pair = predict_pair(target, draft, ts, ds, build, device_budgets, margin, compute_source=source,
                                draft_build=draft_build)
        measured: dict[str, list[Any]] = {}
        if args.measure:
            for model, info in ((pair.target, target), (pair.draft, draft)):
                if model is not None and info is not None:
                    measured[model.role] = _measure(
                        llama_devices, model, info, ts if model.role == "target" else ds
                    )
    except (GGUFError, PredictionError, llama_devices.MeasureError, OSError, rpc.RpcError) as e:
        print(f"specchat memory: {e}", file=sys.stderr)
        return 2
    data = _to_json(pair, build.has_gpu, margin, fit, measured)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_text(pair, data, measured)
    return 1 if fit is not None and not fit.ok else 0


def _measure(llama_devices: Any, m: ModelPrediction, info: GGUFInfo, s: ModelSettings) -> list[Any]:
    fitted = m.placement.n_gpu_layers
    return llama_devices.measure_model(
        info.path,
        n_ctx=m.n_ctx,
        n_gpu_layers=fitted,
        flash_attn=s.flash_attn,
        type_k=s.type_k,
        type_v=s.type_v,
        n_batch=s.n_batch,
        n_ubatch=s.n_ubatch,
        role=m.role,
        n_threads=2,
    )


def _model_json(m: ModelPrediction, measured: list[Any]) -> dict[str, Any]:
    return {
        "path": m.path,
        "n_layer": m.n_layer,
        "n_ctx": m.n_ctx,
        "n_gpu_layers": m.placement.n_gpu_layers,
        "gpu_layers": m.placement.gpu_repeating_layers,
        "output_on_gpu": m.placement.output_on_gpu,
        "weights_bytes": m.weights_bytes,
        "kv_bytes": m.kv_bytes,
        "compute_bytes": m.compute_bytes,
        "output_bytes": m.output_bytes,
        "total_bytes": m.total_bytes,
        "per_device": {d: m.device_bytes(d) for d in m.devices()},
        "buffers": [
            {"kind": b.kind, "device": b.device, "label": b.label, "bytes": b.bytes} for b in m.buffers
        ],
        "measured": [
            {"kind": b.kind, "device": b.device, "label": b.label, "bytes": b.bytes} for b in measured
        ],
        "notes": list(m.notes),
    }


def _endpoint(device: str) -> str | None:
    from app.llama_backend import rpc

    return rpc.endpoint_of(device)


def _to_json(
    pair: PairPrediction, has_gpu: bool, margin: int, fit: Any, measured: dict[str, list[Any]]
) -> dict:
    data: dict[str, Any] = {
        "budget_kind": "gpu" if has_gpu else "ram",
        "target": _model_json(pair.target, measured.get("target", [])),
        "draft": _model_json(pair.draft, measured.get("draft", [])) if pair.draft else None,
        "overhead": [
            {
                "device": b.device,
                "label": b.label,
                "bytes": b.bytes,
                "measured_bytes": _measured_overhead(measured, b.device),
            }
            for b in pair.overhead
        ],
        "devices": [
            {
                "device": u.device,
                "kind": u.kind,
                "rpc_endpoint": _endpoint(u.device),
                "predicted_bytes": u.predicted_bytes,
                "free_bytes": u.free_bytes,
                "total_bytes": u.total_bytes,
                "status": u.status,
                "overshoot_bytes": u.overshoot_bytes,
            }
            for u in pair.uses
        ],
        "total_bytes": pair.total_bytes,
        "budget_bytes": pair.budget_bytes,
        "margin_bytes": margin,
        "status": pair.status,
    }
    if fit is not None:
        data["fit"] = {
            "ok": fit.ok,
            "target_ngl": fit.target_ngl,
            "draft_ngl": fit.draft_ngl,
            "n_ctx": fit.n_ctx,
            "draft_ctx": fit.draft_ctx,
            "op_offload": fit.op_offload,
            "explanation": fit.explanation,
            "suggestion": fit.suggestion,
            "overshoot_bytes": fit.overshoot_bytes,
        }
    return data


def _measured_overhead(measured: dict[str, list[Any]], device: str) -> int | None:
    """The runtime overhead NVML saw on `device` (the largest over the models measured), else None."""
    seen = [b.bytes for bufs in measured.values() for b in bufs if b.kind == "overhead" and b.device == device]
    return max(seen) if seen else None


def _mib(n: int) -> str:
    return f"{n / MiB:9.2f} MiB"


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def _print_text(pair: PairPrediction, data: dict[str, Any], measured: dict[str, list[Any]]) -> None:
    if data["budget_kind"] == "ram":
        print("no GPU in this llama.cpp build: everything runs on the CPU; budgeting system RAM")
    for m in pair.models:
        p = m.placement
        print(f"\n{m.role}: {m.path}  ({m.n_layer} layers, context {m.n_ctx}, -ngl {p.n_gpu_layers})")
        meas = measured.get(m.role)
        print(f"  {'buffer':27s} {'device':8s} {'predicted':>13s}" + (f" {'measured':>13s}" if meas else ""))
        for b in m.buffers:
            line = f"  {b.kind:8s} {b.label:18.18s} {b.device:8s} {_mib(b.bytes)}"
            if meas:
                got = sum(x.bytes for x in meas if x.kind == b.kind and x.device == b.device)
                line += f" {_mib(got)}" + (f" ({(b.bytes - got) / got:+.1%})" if got else "")
                if b.kind == "output" and got != b.bytes:
                    line += "  (llama.cpp reports 1 row at load; it grows to K+1 rows when verifying)"
            print(line)
        print(f"  {'total':27s} {'':8s} {_mib(m.total_bytes)}")
        for note in m.notes:
            print(f"  note: {note}")
    for o in pair.overhead:
        got = _measured_overhead(measured, o.device)
        seen = f", measured {_mib(got)} by NVML" if got is not None else ""
        print(f"\nruntime overhead on {o.device}: {_mib(o.bytes)} ({o.label}, estimate{seen})")
    print("\ndevices:")
    for u in pair.uses:
        name = "system RAM" if u.device == "CPU" else u.device
        print(
            f"  {name:10s} {_gib(u.predicted_bytes)} predicted, {_gib(u.free_bytes)} free "
            f"of {_gib(u.total_bytes)}: {u.status}"
        )
    print(f"pair total {_gib(pair.total_bytes)} against a budget of {_gib(pair.budget_bytes)}")
    fit = data.get("fit")
    if fit:
        print(f"\nfit: {fit['explanation']}")
        if fit["ok"]:
            flags = f"-ngl {fit['target_ngl']} -c {fit['n_ctx']}"
            if fit["draft_ngl"] is not None:
                flags += f" -ngld {fit['draft_ngl']}"
            print(f"use: {flags}")
        else:
            print(f"suggested fix: {fit['suggestion']}")

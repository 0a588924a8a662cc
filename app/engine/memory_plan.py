"""The memory prediction for exactly what SpecSession will load: its PairConfig, its context
settings (n_outputs_max, repacking) and this llama.cpp build's devices. Checked before loading."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.engine.pair_config import PairConfig
from app.llama_backend import ContextConfig, rpc
from app.llama_backend.devices import Device, build_spec, dry_run_compute, list_devices
from app.memory import (
    DEFAULT_MARGIN,
    BuildSpec,
    ComputeSource,
    ModelSettings,
    PairPrediction,
    budgets,
    predict_pair,
    require_fit,
)
from app.models.gguf_meta import read_gguf

ENGINE_OUTPUTS_MAX = ContextConfig().n_outputs_max  # the logits rows every context the engine opens takes


def engine_settings(role: str, n_batch: int = 512, **fields: Any) -> ModelSettings:
    """ModelSettings as the engine opens a context (the session's check and every meter, the picker's included):
    its compute buffer sized for ENGINE_OUTPUTS_MAX rows of logits, not llama.cpp's n_batch. The target's output
    buffer grows to that many rows, since long copies verify up to it (K + 1 rows undercounted a 48-row verify
    by 24 MiB with a 152k vocabulary); the draft asks for one row at a time."""
    rows = min(ENGINE_OUTPUTS_MAX, n_batch)
    return ModelSettings(n_batch=n_batch, n_ubatch=n_batch, n_outputs_max=rows,
                         n_outputs=rows if role == "target" else 1, **fields)


def model_settings(cfg: PairConfig, role: str) -> ModelSettings:
    return engine_settings(
        role,
        cfg.n_batch,
        n_gpu_layers=cfg.n_gpu_layers if role == "target" else cfg.n_gpu_layers_draft,
        n_ctx=cfg.n_ctx if role == "target" else (cfg.n_ctx_draft or cfg.n_ctx),
        type_k=cfg.type_k,
        type_v=cfg.type_v,
        flash_attn=cfg.flash_attn,
    )


@dataclass(frozen=True)
class Placing:
    """Where a pair's models may go on this build: each model's llama.cpp devices (for
    ModelConfig.devices and ModelSettings.devices; None: llama.cpp's default, every GPU device) and
    each model's BuildSpec for the prediction, plus the devices whose budgets count."""

    build: BuildSpec  # the target's: its GPUs in the order llama.cpp splits layers over them
    draft_build: BuildSpec
    devices: list[Device]
    target_devices: tuple[str, ...] | None = None
    draft_devices: tuple[str, ...] | None = None


def placing_for(cfg: PairConfig) -> Placing:
    """Connect to the config's RPC servers (checked first, once per process) and place both models.

    With RPC servers, the target gets their devices first (llama.cpp's own order: it puts RPC devices
    at the front to keep network transfers few) and then the local GPUs; the draft only the local GPUs.
    Devices are listed once: an RPC device's memory is a question to its server.
    """
    remote = [d.name for d in rpc.connect(cfg.rpc)] if cfg.rpc or rpc.connected() else None
    devices = list_devices()
    build = build_spec(devices)
    if not cfg.repack:
        build = replace(build, repack_types=frozenset())  # SpecSession loads without CPU repacking
    if remote is None:
        return Placing(build, build, devices)
    local = [d.name for d in devices if d.type in ("gpu", "igpu") and not rpc.is_rpc_device(d.name)]
    target_devs, draft_devs = tuple(remote + local), tuple(local)
    by_name = {g.name: g for g in build.gpus}
    return Placing(
        replace(build, gpus=tuple(by_name[n] for n in target_devs if n in by_name)),
        replace(build, gpus=tuple(by_name[n] for n in draft_devs if n in by_name)),
        [d for d in devices if not rpc.is_rpc_device(d.name) or d.name in target_devs],
        target_devs,
        draft_devs,
    )


def predict_for_config(cfg: PairConfig, margin: int = DEFAULT_MARGIN,
                       placing: Placing | None = None) -> PairPrediction:
    placing = placing or placing_for(cfg)
    target = read_gguf(cfg.target)
    draft = read_gguf(cfg.draft) if cfg.draft else None
    t_settings = replace(model_settings(cfg, "target"), devices=placing.target_devices)
    d_settings = replace(model_settings(cfg, "draft"), devices=placing.draft_devices)
    return predict_pair(target, draft, t_settings, d_settings if draft else None, placing.build,
                        budgets(placing.devices), margin, compute_source=compute_source(placing.build),
                        draft_build=placing.draft_build)


def compute_source(build: BuildSpec) -> ComputeSource | None:
    """llama.cpp's dry run for the compute buffers on GPU builds, where a graph split between the GPU
    and the CPU is not captured by a closed form; on the CPU the model is exact and free."""
    if not build.has_gpu:
        return None
    return lambda info, settings: dry_run_compute(info.path, settings)


def check_fits(cfg: PairConfig, placing: Placing | None = None) -> PairPrediction:
    """Raise WontFitError (overshoot and the fix) when the pair is predicted not to fit."""
    prediction = predict_for_config(cfg, placing=placing)
    require_fit(prediction)
    return prediction

"""The memory prediction for exactly what SpecSession will load: its PairConfig, its context
settings (n_outputs_max, repacking) and this llama.cpp build's devices. Checked before loading."""

from __future__ import annotations

from dataclasses import replace

from app.engine.pair_config import PairConfig
from app.llama_backend import rpc
from app.llama_backend.devices import build_spec, dry_run_compute, list_devices
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

ENGINE_OUTPUTS_MAX = 32  # ContextConfig.n_outputs_max


def model_settings(cfg: PairConfig, role: str, draft_max: int = 6) -> ModelSettings:
    return ModelSettings(
        n_gpu_layers=cfg.n_gpu_layers if role == "target" else cfg.n_gpu_layers_draft,
        n_ctx=cfg.n_ctx if role == "target" else (cfg.n_ctx_draft or cfg.n_ctx),
        type_k=cfg.type_k,
        type_v=cfg.type_v,
        flash_attn=cfg.flash_attn,
        n_batch=cfg.n_batch,
        n_ubatch=cfg.n_batch,
        n_outputs_max=min(ENGINE_OUTPUTS_MAX, cfg.n_batch),
        n_outputs=draft_max + 1 if role == "target" else 1,
    )


def model_devices(cfg: PairConfig) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(target's, draft's) llama.cpp devices for ModelConfig.devices; None: llama.cpp's default.

    With RPC servers, the target gets their devices first (llama.cpp's own order: it puts RPC devices
    at the front to keep network transfers few) and then the local GPUs; the draft only the local GPUs.
    """
    if not cfg.rpc and not rpc.connected():
        return None, None
    remote = [d.name for d in rpc.connect(cfg.rpc)]
    local = [d.name for d in list_devices() if d.type in ("gpu", "igpu") and not rpc.is_rpc_device(d.name)]
    return tuple(remote + local), tuple(local)


def build_for(cfg: PairConfig) -> tuple[BuildSpec, list]:
    """The target's build (its devices in llama.cpp's order) and every device's budget."""
    target_devs, _ = model_devices(cfg)  # connects to the RPC servers first, so their devices are listed
    devices = list_devices()
    build = build_spec(devices)
    if target_devs is not None:
        by_name = {g.name: g for g in build.gpus}
        build = replace(build, gpus=tuple(by_name[n] for n in target_devs if n in by_name))
        devices = [d for d in devices if not rpc.is_rpc_device(d.name) or d.name in target_devs]
    if not cfg.repack:
        build = replace(build, repack_types=frozenset())  # SpecSession loads without CPU repacking
    return build, devices


def predict_for_config(cfg: PairConfig, draft_max: int = 6, margin: int = DEFAULT_MARGIN) -> PairPrediction:
    build, devices = build_for(cfg)
    _, draft_devs = model_devices(cfg)
    draft_build = build if draft_devs is None else replace(
        build, gpus=tuple(g for g in build.gpus if g.name in draft_devs))
    target = read_gguf(cfg.target)
    draft = read_gguf(cfg.draft) if cfg.draft else None
    target_devs, _ = model_devices(cfg)
    t_settings = replace(model_settings(cfg, "target", draft_max), devices=target_devs)
    d_settings = replace(model_settings(cfg, "draft", draft_max), devices=draft_devs)
    return predict_pair(target, draft, t_settings, d_settings if draft else None, build, budgets(devices), margin,
                        compute_source=compute_source(build), draft_build=draft_build)


def compute_source(build: BuildSpec) -> ComputeSource | None:
    """llama.cpp's dry run for the compute buffers on GPU builds, where a graph split between the GPU
    and the CPU is not captured by a closed form; on the CPU the model is exact and free."""
    if not build.has_gpu:
        return None
    return lambda info, settings: dry_run_compute(info.path, settings)


def check_fits(cfg: PairConfig, draft_max: int = 6) -> PairPrediction:
    """Raise WontFitError (overshoot and the fix) when the pair is predicted not to fit."""
    prediction = predict_for_config(cfg, draft_max)
    require_fit(prediction)
    return prediction

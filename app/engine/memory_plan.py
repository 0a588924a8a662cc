"""The memory prediction for exactly what SpecSession will load: its PairConfig, its context
settings (n_outputs_max, repacking) and this llama.cpp build's devices. Checked before loading."""

from __future__ import annotations

from dataclasses import replace

from app.engine.pair_config import PairConfig
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


def build_for(cfg: PairConfig) -> tuple[BuildSpec, list]:
    devices = list_devices()
    build = build_spec(devices)
    if not cfg.repack:
        build = replace(build, repack_types=frozenset())  # SpecSession loads without CPU repacking
    return build, devices


def predict_for_config(cfg: PairConfig, draft_max: int = 6, margin: int = DEFAULT_MARGIN) -> PairPrediction:
    build, devices = build_for(cfg)
    target = read_gguf(cfg.target)
    draft = read_gguf(cfg.draft) if cfg.draft else None
    return predict_pair(target, draft, model_settings(cfg, "target", draft_max),
                        model_settings(cfg, "draft", draft_max) if draft else None, build, budgets(devices), margin,
                        compute_source=compute_source(build))


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

"""Memory prediction and auto-fit for a target + draft pair (Qt-free, no llama_cpp import).

The public surface in one place; the rules live in `memory_predict` (one model, per buffer and per
device) and `memory_fit` (the pair against the budgets, the auto-fit). Measurement after loading
lives in `llama_devices` (it needs llama_cpp).
"""

from __future__ import annotations

from app.memory.fit import (
    DEFAULT_MARGIN,
    SEGMENTS,
    ComputeSource,
    DeviceBudget,
    DeviceUse,
    FitResult,
    PairPrediction,
    WontFitError,
    budgets,
    fit_pair,
    measured_segments,
    meter_segments,
    predict_pair,
    require_fit,
)
from app.memory.predict import (
    Buffer,
    BuildSpec,
    GiB,
    GpuSpec,
    MiB,
    ModelPrediction,
    ModelSettings,
    Placement,
    PredictionError,
    placement,
    predict_model,
)

__all__ = [
    "DEFAULT_MARGIN",
    "SEGMENTS",
    "Buffer",
    "BuildSpec",
    "ComputeSource",
    "DeviceBudget",
    "DeviceUse",
    "FitResult",
    "GiB",
    "GpuSpec",
    "MiB",
    "ModelPrediction",
    "ModelSettings",
    "PairPrediction",
    "Placement",
    "PredictionError",
    "WontFitError",
    "budgets",
    "fit_pair",
    "measured_segments",
    "meter_segments",
    "placement",
    "predict_model",
    "predict_pair",
    "require_fit",
]

"""Target + draft together against each device's budget, and the auto-fit of layers and context.

Budgets come from llama.cpp's device list (free/total per GPU) and from psutil for system RAM.
With no GPU everything is budgeted against the RAM available now, and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal, Protocol

import psutil

from app.memory.predict import (
    RUNTIME_OVERHEAD,
    Buffer,
    BuildSpec,
    GiB,
    ModelPrediction,
    ModelSettings,
    predict_model,
)
from app.models.gguf_meta import GGUFInfo

Status = Literal["ok", "tight", "over"]
DEFAULT_MARGIN = GiB
MIN_FIT_CTX = 2048


class DeviceLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def free_bytes(self) -> int: ...
    @property
    def total_bytes(self) -> int: ...


@dataclass(frozen=True)
class DeviceBudget:
    device: str  # "CPU" for system RAM, else llama.cpp's GPU name
    kind: Literal["gpu", "ram"]
    free_bytes: int
    total_bytes: int
    description: str


def budgets(devices: Iterable[DeviceLike] = (), ram: tuple[int, int] | None = None) -> list[DeviceBudget]:
    """One budget per GPU (llama.cpp's free/total) plus system RAM (psutil: available/total)."""
    out = [
        DeviceBudget(d.name, "gpu", d.free_bytes, d.total_bytes, getattr(d, "description", d.name))
        for d in devices
        if d.type in ("gpu", "igpu")
    ]
    if ram is None:
        vm = psutil.virtual_memory()
        ram = (int(vm.available), int(vm.total))
    out.append(DeviceBudget("CPU", "ram", ram[0], ram[1], "system RAM"))
    return out


@dataclass(frozen=True)
class DeviceUse:
    device: str
    kind: Literal["gpu", "ram"]
    predicted_bytes: int
    free_bytes: int
    total_bytes: int
    margin_bytes: int

    @property
    def status(self) -> Status:
        spare = self.free_bytes - self.predicted_bytes
        return "over" if spare < 0 else "tight" if spare < self.margin_bytes else "ok"

    @property
    def overshoot_bytes(self) -> int:
        """How much must be freed (margin included) for this device to be green."""
        return max(self.predicted_bytes + self.margin_bytes - self.free_bytes, 0)


@dataclass(frozen=True)
class PairPrediction:
    target: ModelPrediction
    draft: ModelPrediction | None
    overhead: tuple[Buffer, ...]
    uses: tuple[DeviceUse, ...]
    gpu_present: bool

    @property
    def models(self) -> list[ModelPrediction]:
        return [self.target] + ([self.draft] if self.draft else [])

    @property
    def total_bytes(self) -> int:
        return sum(m.total_bytes for m in self.models) + sum(b.bytes for b in self.overhead)

    @property
    def budget_bytes(self) -> int:
        return sum(u.free_bytes for u in self.uses)

    @property
    def status(self) -> Status:
        states = {u.status for u in self.uses}
        return "over" if "over" in states else "tight" if "tight" in states else "ok"

    def use(self, device: str) -> DeviceUse | None:
        return next((u for u in self.uses if u.device == device), None)

    @property
    def primary(self) -> DeviceUse:
        """The device the meter shows: the first GPU, or system RAM when there is none."""
        return next((u for u in self.uses if u.kind == "gpu"), self.uses[-1])


# llama.cpp's own compute buffers for a model and settings (its no_alloc dry run), or None to keep ours.
ComputeSource = Callable[[GGUFInfo, ModelSettings], Sequence[Buffer]]


def predict_pair(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    target_settings: ModelSettings,
    draft_settings: ModelSettings | None,
    build: BuildSpec,
    device_budgets: Sequence[DeviceBudget],
    margin: int = DEFAULT_MARGIN,
    compute_source: ComputeSource | None = None,
    draft_build: BuildSpec | None = None,  # the draft's devices, where they differ (RPC: local only)
) -> PairPrediction:
    tp = predict_model(target, target_settings, build, "target")
    dp = (
        predict_model(draft, draft_settings or target_settings, draft_build or build, "draft")
        if draft is not None else None
    )
    if compute_source is not None:
        tp = _with_compute(tp, compute_source(target, target_settings))
        if dp is not None and draft is not None:
            dp = _with_compute(dp, compute_source(draft, draft_settings or target_settings))
    per_gpu = RUNTIME_OVERHEAD.get(build.runtime, 0)
    overhead = tuple(
        Buffer("overhead", g.name, per_gpu, f"{build.runtime} runtime") for g in build.gpus if per_gpu
    )
    uses = []
    for b in device_budgets:
        used = sum(m.device_bytes(b.device) for m in [tp] + ([dp] if dp else []))
        used += sum(o.bytes for o in overhead if o.device == b.device)
        uses.append(DeviceUse(b.device, b.kind, used, b.free_bytes, b.total_bytes, margin))
    return PairPrediction(tp, dp, overhead, tuple(uses), build.has_gpu)


def _with_compute(m: ModelPrediction, compute: Sequence[Buffer]) -> ModelPrediction:
    """`m` with llama.cpp's own compute buffers in place of the modelled ones."""
    others = tuple(b for b in m.buffers if b.kind != "compute")
    note = "compute buffers: llama.cpp's own dry run (no_alloc), exact for this build and device"
    kept = tuple(n for n in m.notes if "compute buffers" not in n)  # the closed form's caveat is moot
    return replace(m, buffers=others + tuple(compute), notes=(*kept, note))


@dataclass(frozen=True)
class FitResult:
    ok: bool
    target_ngl: int
    draft_ngl: int | None
    n_ctx: int
    draft_ctx: int | None
    explanation: str
    prediction: PairPrediction
    overshoot_bytes: dict[str, int]
    suggestion: str = ""
    op_offload: bool = True  # False: create the contexts with op_offload off (the GPU stays idle)


class WontFitError(RuntimeError):
    """The pair is predicted not to fit; the message holds the overshoot and the suggested fix."""


def _layers_text(role: str, m: ModelPrediction) -> str:
    p = m.placement
    if p.gpu_repeating_layers == m.n_layer and p.output_on_gpu:
        return f"{role} fully on GPU"
    if not p.output_on_gpu:
        return f"{role} on CPU"
    return f"{role} {p.gpu_repeating_layers} of {m.n_layer} layers on GPU (-ngl {p.n_gpu_layers})"


def fit_pair(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    target_settings: ModelSettings,
    draft_settings: ModelSettings | None,
    build: BuildSpec,
    device_budgets: Sequence[DeviceBudget],
    margin: int = DEFAULT_MARGIN,
    min_ctx: int = MIN_FIT_CTX,
    compute_source: ComputeSource | None = None,
    draft_build: BuildSpec | None = None,
) -> FitResult:
    """Choose -ngl for both models and, only if needed, a smaller context, so the pair fits with `margin`.

    Order of preference, at the requested context first: both fully on GPU; the draft fully on GPU
    and as many target layers as fit (a half-offloaded draft is slower than none); the draft on the
    CPU and as many target layers as fit. Then the same at half the context, down to `min_ctx`.
    The search uses the modelled compute buffers; a `compute_source` (llama.cpp's dry run) then
    checks the chosen settings, and the search goes on past them if the real figures do not fit.
    """
    dsettings = draft_settings or target_settings
    n_ctx0 = target_settings.n_ctx or target.context_length
    t_full, d_full = target.n_layer + 1, (draft.n_layer + 1) if draft else 0

    def at(ctx: int, t_ngl: int, d_ngl: int = 0, op_offload: bool = True) -> PairPrediction:
        ts = replace(target_settings, n_ctx=ctx, n_gpu_layers=t_ngl, op_offload=op_offload)
        ds = replace(
            dsettings, n_ctx=min(dsettings.n_ctx or ctx, ctx), n_gpu_layers=d_ngl, op_offload=op_offload
        )
        return predict_pair(target, draft, ts, ds, build, device_budgets, margin, draft_build=draft_build)

    def fits(p: PairPrediction) -> bool:
        return all(u.overshoot_bytes == 0 for u in p.uses)

    def checked(ctx: int, t_ngl: int, d_ngl: int = 0, op_offload: bool = True) -> PairPrediction | None:
        """These settings' prediction if it fits, with llama.cpp's own compute figures where given."""
        p = at(ctx, t_ngl, d_ngl, op_offload)
        if not fits(p) or compute_source is None:
            return p if fits(p) else None
        ts = replace(target_settings, n_ctx=ctx, n_gpu_layers=t_ngl, op_offload=op_offload)
        ds = replace(
            dsettings, n_ctx=min(dsettings.n_ctx or ctx, ctx), n_gpu_layers=d_ngl, op_offload=op_offload
        )
        real = predict_pair(
            target, draft, ts, ds if draft else None, build, device_budgets, margin, compute_source,
            draft_build=draft_build,
        )
        return real if fits(real) else None

    ctxs = [n_ctx0]
    while ctxs[-1] // 2 >= min_ctx:
        ctxs.append(ctxs[-1] // 2)
    draft_choices = [d_full, 0] if (draft and build.has_gpu) else [0]
    for ctx in ctxs:
        for d_ngl in draft_choices:
            t_ngl = _max_target_layers(partial(at, ctx, d_ngl=d_ngl), t_full if build.has_gpu else 0)
            if t_ngl is not None:
                real = checked(ctx, t_ngl, d_ngl)
                while real is None and t_ngl > 0:
                    t_ngl -= 1  # the real compute buffers are larger than modelled: one layer fewer
                    real = checked(ctx, t_ngl, d_ngl)
                if real is not None:
                    p = real
                    return FitResult(
                        True,
                        t_ngl,
                        d_ngl if draft else None,
                        ctx,
                        p.draft.n_ctx if p.draft else None,
                        _explain(p, ctx, n_ctx0),
                        p,
                        {},
                    )
        if build.has_gpu:  # last resort at this context: leave the GPU alone entirely
            real = checked(ctx, 0, 0, op_offload=False)
            if real is not None:
                p = real
                return FitResult(
                    True,
                    0,
                    0 if draft else None,
                    ctx,
                    p.draft.n_ctx if p.draft else None,
                    _explain(p, ctx, n_ctx0) + ", GPU unused (op_offload off)",
                    p,
                    {},
                    op_offload=False,
                )
    worst = at(ctxs[-1], 0, 0, op_offload=not build.has_gpu)
    over = {u.device: u.overshoot_bytes for u in worst.uses if u.overshoot_bytes}
    return FitResult(
        False,
        0,
        0 if draft else None,
        ctxs[-1],
        worst.draft.n_ctx if worst.draft else None,
        "does not fit: " + _overshoot_text(over),
        worst,
        over,
        _suggest(worst, over, draft is not None),
    )


def _max_target_layers(at: Callable[[int], PairPrediction], t_full: int) -> int | None:
    """Largest -ngl whose GPU use fits (GPU use grows with -ngl), or None when even 0 does not."""

    def gpu_fits(n: int) -> bool:
        return all(u.overshoot_bytes == 0 for u in at(n).uses if u.kind == "gpu")

    if gpu_fits(t_full):
        return t_full
    if not gpu_fits(0):
        return None
    lo, hi = 0, t_full  # gpu_fits(lo) and not gpu_fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if gpu_fits(mid) else (lo, mid)
    return lo


def _explain(p: PairPrediction, ctx: int, requested: int) -> str:
    parts = []
    if not p.gpu_present:
        parts.append("no GPU in this llama.cpp build: both models on CPU, budgeting system RAM")
    else:
        if p.draft:
            parts.append(_layers_text("draft", p.draft))
        parts.append(_layers_text("target", p.target))
    parts.append(f"context {ctx}" + (f" (reduced from {requested})" if ctx != requested else ""))
    return ", ".join(parts)


def _overshoot_text(over: dict[str, int]) -> str:
    return "; ".join(
        f"{'system RAM' if d == 'CPU' else d} short by {b / GiB:.2f} GiB (margin included)"
        for d, b in over.items()
    )


def _suggest(p: PairPrediction, over: dict[str, int], has_draft: bool) -> str:
    tips = [f"free {b / GiB:.2f} GiB of {'RAM' if d == 'CPU' else d}" for d, b in over.items()]
    tips.append("pick smaller quantisations (e.g. Q4_K_M instead of Q8_0)")
    tips.append("use a quantised KV cache (--cache-type-k/v q8_0)")
    if has_draft and p.draft is not None:
        tips.append(f"drop the draft model (--mode lookup saves {p.draft.total_bytes / GiB:.2f} GiB)")
    return "; or ".join(tips)


def require_fit(p: PairPrediction) -> None:
    """Raise `WontFitError` when any device is predicted over its free memory (loading refuses)."""
    over = {u.device: u.predicted_bytes - u.free_bytes for u in p.uses if u.status == "over"}
    if over:
        raise WontFitError(
            "the models are predicted not to fit: "
            + "; ".join(
                f"{'system RAM' if d == 'CPU' else d} over by {b / GiB:.2f} GiB" for d, b in over.items()
            )
            + ". Fix: "
            + _suggest(p, over, p.draft is not None)
            + "; or run `specchat memory --fit`, or load anyway with --force"
        )


SEGMENTS = ("target_weights", "draft_weights", "target_kv", "draft_kv", "compute", "overhead")


class BufferLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def bytes(self) -> int: ...


def _segment(role: str | None, kind: str) -> str:
    if kind in ("model", "repack"):
        return "draft_weights" if role == "draft" else "target_weights"
    if kind == "kv":
        return "draft_kv" if role == "draft" else "target_kv"
    return "overhead" if kind == "overhead" else "compute"  # compute and output (logits) buffers


def meter_segments(pair: PairPrediction, device: str | None = None) -> dict[str, int]:
    """Predicted bytes on one device (default: the meter's primary one) by meter segment."""
    device = device or pair.primary.device
    out = dict.fromkeys(SEGMENTS, 0)
    for m in pair.models:
        for b in m.buffers:
            if b.device == device:
                out[_segment(m.role, b.kind)] += b.bytes
    for b in pair.overhead:
        if b.device == device:
            out["overhead"] += b.bytes
    return out


def measured_segments(
    buffers: Iterable[BufferLike], device: str, process_bytes: int | None = None
) -> dict[str, int]:
    """llama.cpp's measured buffers (with `role` "target"/"draft") on one device, by meter segment.

    llama.cpp does not report the runtime overhead: the "overhead" key is present only when the
    process's own use of the device is known (NVML), as that use less llama.cpp's buffers.
    """
    out = dict.fromkeys(SEGMENTS, 0)
    for b in buffers:
        if b.device == device:
            out[_segment(getattr(b, "role", None), b.kind)] += b.bytes
    del out["overhead"]
    if process_bytes is not None:
        out["overhead"] = max(process_bytes - sum(out.values()), 0)
    return out

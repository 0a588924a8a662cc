"""What a speculative run is asked to do: how far to draft, how to judge copies, which rows a verify may hold."""

from __future__ import annotations

from dataclasses import dataclass

# SpecParams.copy_max "auto": resolved by the device (draft_policy.resolve_copies), the settings' default.
COPY_MAX_AUTO = -1


@dataclass(frozen=True, slots=True)
class SpecParams:
    # K: the most tokens drafted per step (the governor picks K <= draft_max).
    draft_max: int = 6
    draft_min: int = 0  # never cut a draft for low confidence before this many tokens
    p_min: float = 0.75  # stop drafting when the draft's top probability falls below this
    adaptive: bool = True  # let the governor change K and turn drafting off when it loses
    # Keep verify batches where they were measured to give one-token decoding's bits, where a bound was measured
    # (SpecEngine.one_token: the CPU without repacking; 7 rows below position 256 on the CPUs seen).
    one_token_kernels: bool = True
    k_start: int = 3  # first K when adaptive: a cheap first draft while the governor measures
    # The most tokens of a long running copy drafted per step (lookup and hybrid, adaptive runs only; 0: off),
    # under a governor of its own. The engine's own default is off; the app's is "auto" (draft_policy.COPY_MAX_AUTO,
    # negative), which SpecSession.resolve_spec turns into 31. The engine reads an unresolved negative value
    # as off.
    copy_max: int = 0
    # Take only sure copies instead (draft_policy.SURE_COPY_*): a copy that agreed for 16 tokens, cut before the
    # next token the reply edited before, at 12 tokens or more, when a fully accepted one beats drafting's
    # expected rate. What resolve_spec picks on the CPU, where a 16-row verify costs 6.7 plain steps and a long
    # copy that fails early loses more than the copy governor's successes win (docs/BENCHMARKS.md, runs 6-11).
    sure_copies: bool = False
    # With sure copies: once one of SURE_COPY_RUN tokens or more was accepted whole, the next may run to this many
    # tokens instead of copy_max (0: never; resolve_spec sets draft_policy.SURE_COPY_LONG where copy_max is "auto").
    sure_copy_long: int = 0
    # Keep the passes' shapes steady: a draft cut short (p-min, an end of turn, a short n-gram match) is verified
    # padded to K + 1 rows, and the draft cache catches up one row at a time. On CUDA llama.cpp replays a
    # captured graph only after two calls of one shape, so each change of shape costs two passes launched
    # kernel by kernel, 2-3x a small model's step on an H200. Off by default: on the H200 it made fixed-K
    # drafting's verify passes 2.2x faster, but the adaptive modes were not faster with it, and the version
    # without its measured flaw (empty drafts padded too) awaits a GPU run (docs/GPU.md).
    steady_shapes: bool = False

"""What a verify batch costs on this device, row count by row count, and whether its logits are
bit-for-bit those of one-token decoding (flash attention on and off).

Timing goes through `LlamaContext.decode`, which synchronises the device after `llama_decode`, so
a batch's time is its real time (on a GPU llama_decode only queues the work).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.llama_backend import ContextConfig, LlamaContext, LlamaModel, ModelConfig


def prompt_tokens(n: int, seed: int = 1) -> list[int]:
    """Ordinary vocabulary ids (no special tokens), fixed by the seed."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(1000, 100000, n)]


def verify_ms(model: LlamaModel, rows: list[int], reps: int, n_ctx: int = 2048, prefix: int = 256,
              threads: int = 0) -> dict[int, float]:
    """Least ms of `reps` decodes of `r` rows (logits for every row) after a `prefix`-token context.

    The least, not the median: on a shared CPU (the dry run) other work only ever adds time.
    """
    ctx = LlamaContext(model, ContextConfig(n_ctx=n_ctx, n_threads=threads, n_outputs_max=max(rows)))
    try:
        tokens = prompt_tokens(prefix + max(rows))
        ctx.decode(tokens[:prefix], logits_for="none")
        for r in (1, max(rows)):  # warm-up: kernels, graph allocation, clocks
            ctx.decode(tokens[prefix : prefix + r], logits_for="all")
            ctx.truncate(prefix)
        out: dict[int, float] = {}
        for r in rows:
            times = []
            for _ in range(reps):
                before = ctx.native_ms
                ctx.decode(tokens[prefix : prefix + r], logits_for="all")
                times.append(ctx.native_ms - before)
                ctx.truncate(prefix)
            out[r] = round(min(times), 3)
        return out
    finally:
        ctx.close()


def identity(model: LlamaModel, rows: list[int], flash_attn: bool, n_ctx: int = 1024, prefix: int = 64,
             threads: int = 0) -> dict[int, dict[str, float | bool]]:
    """Per row count K: are the K rows of one batch the logits of K one-token decodes, bit for bit?"""
    ctx = LlamaContext(model, ContextConfig(n_ctx=n_ctx, n_threads=threads, flash_attn=flash_attn,
                                            n_outputs_max=max(rows)))
    try:
        tokens = prompt_tokens(prefix + max(rows), seed=2)
        ctx.decode(tokens[:prefix], logits_for="none")
        singles = []
        for i in range(max(rows)):
            ctx.decode([tokens[prefix + i]], logits_for="all")
            singles.append(ctx.logits(0).copy())
        out: dict[int, dict[str, float | bool]] = {}
        for k in rows:
            ctx.truncate(prefix)
            ctx.decode(tokens[prefix : prefix + k], logits_for="all")
            batch = np.stack([ctx.logits(i) for i in range(k)])
            single = np.stack(singles[:k])
            diff = float(np.max(np.abs(batch - single)))
            same_argmax = bool(np.all(batch.argmax(axis=1) == single.argmax(axis=1)))
            out[k] = {"identical": bool(np.array_equal(batch, single)), "max_abs_diff": diff,
                      "same_argmax": same_argmax}
        return out
    finally:
        ctx.close()


def measure(path: Path, rows: list[int], reps: int, identity_rows: list[int] | None, threads: int = 0) -> dict:
    """verify_ms for one model, and (for targets) identity with flash attention on and off."""
    model = LlamaModel(ModelConfig(path, n_gpu_layers=-1))
    try:
        result: dict = {"verify_ms": verify_ms(model, rows, reps, threads=threads)}
        if identity_rows:
            result["identity"] = {
                "flash_attn_on": identity(model, identity_rows, True, threads=threads),
                "flash_attn_off": identity(model, identity_rows, False, threads=threads),
            }
        return result
    finally:
        model.close()

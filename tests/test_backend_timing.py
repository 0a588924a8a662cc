"""The decode timer must cover the device's work. On GPU backends llama_decode only queues it and the
wait would fall into the next llama_get_logits_ith, outside every timer, so verify steps would look
free and the governor would misjudge. CI has no GPU, so a synchronise that takes a known time stands
in for the device's wait on the real CPU backend."""

from __future__ import annotations

import time

import llama_cpp


def test_decode_timer_includes_the_synchronise(smol_session, monkeypatch) -> None:
    real = llama_cpp.llama_synchronize
    calls: list[float] = []

    def slow_synchronize(ctx):  # the GPU finishing its queue
        calls.append(time.perf_counter())
        time.sleep(0.05)
        return real(ctx)

    monkeypatch.setattr(llama_cpp, "llama_synchronize", slow_synchronize)
    ctx = smol_session.target_ctx
    ctx.clear()
    tokens = smol_session.target_model.tokenize("The quick brown fox")
    before = ctx.native_ms
    ctx.decode(tokens, logits_for="last")
    ctx.decode([tokens[-1]], logits_for="all")
    elapsed = ctx.native_ms - before
    ctx.clear()
    assert len(calls) == 2, "every llama_decode is followed by a synchronise"
    assert elapsed >= 2 * 50.0, f"the timed span ({elapsed:.1f} ms) leaves the synchronise out"

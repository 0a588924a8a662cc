"""Sliding-window targets (Gemma 3 270M, window 512) stay exact past the window (issue 54, item 3).

With llama.cpp's full-size window cache (its default, and SpecChat's) every position stays, so rollbacks and
prefix reuse are exact however far back they cut. A cache sized to the window plus a batch (swa_full off, less
memory) overwrites older positions and llama.cpp's cut succeeds regardless: going back far would decode without
part of the window. SpecChat refuses such a cut (the cache is emptied and the prompt processed again).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.events import FinishEvent, StepEvent
from app.engine.exact_replay import check_run
from app.engine.pair_config import PairConfig
from app.engine.parting import PartingReplay, first_divergence, layout, replay_parting
from app.engine.session import GenParams, SpecSession
from app.engine.speculative import SpecParams
from app.llama_backend import ContextConfig, LlamaContext

NATIVE_BIN = Path(os.environ.get("SPECCHAT_NATIVE_BIN", "/work/native/build/bin"))
TEXT = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'amber'][i % 4]} box holds {i * 7 % 23} stones."
                for i in range(140))


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[SpecSession]:
    # No repacking, as llama-completion runs below (--no-repack).
    session = SpecSession(PairConfig(gemma_path, None, n_ctx=4096, n_threads=2, prompt_cache_mb=0, repack=False))
    yield session
    session.close()


def _tokens(session: SpecSession) -> list[int]:
    tokens = session.target_model.tokenize(TEXT)
    assert session.target_model.n_swa == 512 and len(tokens) > 1300, (session.target_model.n_swa, len(tokens))
    return tokens[:1300]


def _filled(ctx: LlamaContext, tokens: list[int]) -> LlamaContext:
    ctx.clear()
    for _ in ctx.decode_batches(tokens):
        pass
    return ctx


def test_the_default_cache_keeps_the_whole_window(gemma: SpecSession) -> None:
    ctx = _filled(gemma.target_ctx, _tokens(gemma))
    assert ctx._window_kept(1) and ctx._window_kept(700)
    assert ctx.keep_common_prefix([*ctx.tokens[:700], 1, 2]) == 700


def test_a_cut_past_a_small_window_cache_is_refused(gemma: SpecSession) -> None:
    small = LlamaContext(gemma.target_model, ContextConfig(n_ctx=4096, n_threads=2, swa_full=False))
    try:
        tokens = _tokens(gemma)
        _filled(small, tokens)
        assert small.keep_common_prefix(tokens[:1250]) == 1250  # a rollback's distance: the window is there
        assert small.keep_common_prefix([*tokens[:700], 1, 2, 3]) == 0  # positions 189..475 were overwritten
        assert small.n_past == 0 and small.tokens == []
    finally:
        small.close()


def _run(session: SpecSession, prompt: list[int], mode: str, n: int = 160) -> list[object]:
    # Draft on every step it can (the most rollbacks), verifies of up to 7 rows. Not strict: strict replies stop
    # drafting past the span where batches give one-token bits (256 here, app/engine/one_token_bound.py), and
    # these prompts are 600 tokens long.
    spec = SpecParams(adaptive=False, draft_max=6, one_token_kernels=False)
    events = list(session.generate(prompt, GenParams(mode, n, spec=spec)))
    assert isinstance(events[-1], FinishEvent)
    return events


def _reply(session: SpecSession, prompt: list[int], mode: str, n: int = 160) -> FinishEvent:
    finish = _run(session, prompt, mode, n)[-1]
    assert isinstance(finish, FinishEvent)
    return finish


def test_lookup_past_the_window_is_the_plain_reply(gemma: SpecSession) -> None:
    """Prompt plus reply longer than the window, lookup drafting on every step (each rejected draft a rollback),
    without repacking. Every emitted token is the target's own choice on its row, the rows replayed in the run's
    own batches (app/engine/exact_replay.py: a stale or misplaced cache entry past the window changes a row and
    fails it); and where this CPU's batches compute one-token decoding's bits, the reply is plain decoding's,
    token for token."""
    prompt = _tokens(gemma)[:600]
    gemma.clear_caches()
    plain = _reply(gemma, prompt, "none")
    gemma.clear_caches()
    events = _run(gemma, prompt, "lookup")
    lookup = events[-1]
    assert isinstance(lookup, FinishEvent)
    assert lookup.stats.drafted > 0 and lookup.stats.accepted < lookup.stats.drafted  # drafted, and rolled back
    assert len(prompt) + len(plain.tokens) > 512 + 200
    mismatch = check_run(gemma.target_ctx, events, None, gemma.target_model.is_eog)
    assert mismatch is None, f"past the window, reply token {mismatch.position} is not the target's choice: {mismatch}"
    bound = gemma.one_token
    if bound is not None and bound.span is None and bound.probed >= len(prompt) + len(plain.tokens):
        assert lookup.tokens == plain.tokens


@pytest.mark.skipif(not (NATIVE_BIN / "llama-completion").is_file(),
                    reason=f"llama.cpp's tools are not built in {NATIVE_BIN} (set SPECCHAT_NATIVE_BIN; see "
                           "docs/BENCHMARKS.md, \"Comparing with llama.cpp itself\")")
def test_past_the_window_plain_writes_llama_completions_text_and_lookup_parts_only_at_its_own_choice(
        gemma: SpecSession, tmp_path: Path) -> None:
    """The same prompt tokens (checked in llama-completion's --verbose-prompt listing) through llama.cpp's own
    llama-completion, greedy, no repacking: SpecChat's plain reply writes its text, past the window. The lookup
    reply writes it too, or parts from it only where the target, replayed in the lookup run's own batches, chose
    lookup's token: kernel rounding of a close call (on a Zen 4 EPYC they part at reply token 39, "10" for "1",
    where the one-token row's margin is 0.187 and lookup's 7-row batch, past 256 positions, reverses it)."""
    prompt = _tokens(gemma)[:600]
    gemma.clear_caches()
    plain = _reply(gemma, prompt, "none")
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(gemma.target_model.detokenize(prompt[1:]) + "\n", encoding="utf-8")  # BOS: the tool's
    out = subprocess.run([str(NATIVE_BIN / "llama-completion"), "-m", str(gemma.config.target), "-c", "4096",
                          "-t", "2", "--no-repack", "-ngl", "0", "-b", "512", "-ub", "512", "-f", str(prompt_file),
                          "--no-escape", "-n", str(len(plain.tokens)), "--temp", "0", "-no-cnv",
                          "--no-display-prompt", "--verbose-prompt"],
                         capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(NATIVE_BIN)},
                         timeout=600, errors="replace")
    assert out.returncode == 0, out.stderr[-2000:]
    listed = [int(t) for t in re.findall(r" I +(\d+) -> '", out.stderr)]  # "<time> I   2912 -> 'Item'"
    assert listed == prompt, "llama-completion tokenized the prompt otherwise"
    assert out.stdout.startswith(gemma.target_model.detokenize(plain.tokens))
    events = _run(gemma, prompt, "lookup")
    lookup = events[-1]
    assert isinstance(lookup, FinishEvent) and lookup.stats.drafted > 0
    divergence = first_divergence(plain, lookup)
    if divergence is None:
        return
    steps = layout(e for e in events if isinstance(e, StepEvent))
    replay = replay_parting(gemma.target_ctx, prompt, lookup.tokens, steps, divergence)
    assert isinstance(replay, PartingReplay) and replay.reproduced, \
        f"lookup parted from llama-completion's text at reply token {divergence.position} where the target, in " \
        f"lookup's own batches, does not choose lookup's token: {replay}"

"""llama.cpp's n-gram drafters as tools/bench/native_replay.py replays them: each type's rules on made-up token
sequences, and the replay's drafted/accepted counts against llama-speculative-simple's own on recorded replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import native_bench as nb
from tests.research_bench import research_bench
from tests.test_bench import NATIVE_BIN, _suite
from tools.bench import native_replay as nr

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "bench-reports"
A = list(range(1000, 1100))
B = list(range(2000, 2100))
C = list(range(3000, 3100))


def test_ngram_simple_copies_after_the_latest_earlier_spot_of_its_key():
    context = [5, *A[:12], *B[:60], *A[:12], *C[:60], *A[:11]]
    assert nr.NgramSimple().draft(context, A[11]) == C[:48]
    # A match too near the end to give n (12) tokens is no draft.
    assert nr.NgramSimple().draft([5, *B[:60], *A[:12], *A[:11]], A[11]) == []


def test_ngram_map_k_cuts_a_keys_next_draft_to_what_its_last_draft_got_accepted():
    d = nr.NgramMap(key_only=True)
    context = [5, *A[:70], *B[:10], *A[:11]]
    d.begin(context)
    assert d.draft(context, A[11]) == A[12:60]  # the 48 tokens after the key's earlier spot
    d.accept(5)
    context += [A[11], *C[:60], *A[:11]]
    assert d.draft(context, A[11]) == A[12:17]  # the same key again: no longer than what was accepted
    d.accept(0)
    context += [A[11], *B[20:80], *A[:11]]
    assert d.draft(context, A[11]) == []  # a key whose draft failed at once drafts nothing from then on


def test_ngram_map_k4v_drafts_only_a_dominant_continuation():
    d = nr.NgramMap(key_only=False)
    # The key A[:12] was followed by B once and by C once: no value dominates, so no draft.
    context = [5, *A[:12], *B[:60], *A[:12], *C[:60], *A[:11]]
    d.begin(context)
    assert d.draft(context, A[11]) == []
    # Followed by B twice and C once: B dominates (2 >= 2 * 1), so there is a draft. As llama.cpp's code has it,
    # the draft is what follows the key's latest spot (C), not the most frequent value.
    context = [5, *A[:12], *B[:60], *A[:12], *B[:60], *A[:12], *C[:60], *A[:11]]
    d = nr.NgramMap(key_only=False)
    d.begin(context)
    assert d.draft(context, A[11]) == C[:48]


def test_ngram_mod_drafts_48_to_64_tokens_or_nothing():
    d = nr.NgramMod()
    short = [*A[:40], *A[:23]]  # 39 indexed 24-grams: a chain of 39 tokens, under n_min
    d.begin(short)
    assert d.draft(short, A[23]) == []
    d = nr.NgramMod()
    long = [*A[:80], *A[:23]]
    d.begin(long)
    assert d.draft(long, A[23]) == [*A[24:80], *A[:8]]  # capped at n_max = 64


def test_ngram_mod_resets_its_table_after_five_poor_drafts():
    d = nr.NgramMod()
    context = [*A[:80], *A[:23]]
    d.begin(context)
    for _ in range(4):
        assert d.draft(context, A[23])
        d.accept(0)
    assert d.entries
    d.draft(context, A[23])
    d.accept(0)
    assert not d.entries and d.i_last == 0


def test_replay_writes_the_reply_and_prices_each_verify_by_its_rows():
    prompt = [5, *A[:70], *B[:10], *A[:11], A[11]]
    reply = [*A[12:40], 77, 78]
    costs = {1: 1.0, 8: 4.0, 16: 6.0, 32: 10.0}
    r = nr.replay("ngram-simple", prompt, reply, stopped=True, n_predict=100, eog=99)
    assert r.tokens == len(reply) + 1  # the end of turn included
    # The first verify: the prompt's last token and 48 drafted tokens, 28 of them right.
    assert (r.drafted, r.accepted, r.steps) == (48, 28, 3)
    # 49 rows, past the largest measured count, at its price per row; then two plain steps (78, the end of turn).
    assert r.cost(costs) == pytest.approx(10.0 * 49 / 32 + 2.0)
    assert r.speedup(costs) == pytest.approx(31 / r.cost(costs))


@pytest.mark.parametrize("report, corpus, least", [
    ("run25a.json", "corpus-run25.json", 14),  # the AMD EPYC kind
    ("run32a.json", "corpus-run32-xeon.json", 21),  # the Intel Xeon kind, default suite
    ("run32b.json", "corpus-run32-xeon-heldout.json", 12),  # the same, held-out suite
])
def test_replay_counts_are_llama_cpps_own(report, corpus, least):
    """Greedy replies do not depend on the drafts, so a faithful replay drafts and accepts exactly what
    llama-speculative-simple reported on the same reply (both recorded by one `bench --native --replay-out`)."""
    runs = json.loads((REPORTS / report).read_text())["runs"]
    data = json.loads((REPORTS / corpus).read_text())
    eogs = set(data["eog"])
    checked = 0
    for pid, p in data["prompts"].items():
        end = next(t for t in reversed(p["prompt"]) if t in eogs)
        for mode in nr.REPLAYED:
            real = [r for r in runs if r["prompt_id"] == pid and r["mode"] == "llama.cpp:" + mode and r["identical"]]
            if not real:
                continue
            got = nr.replay(mode, p["prompt"], p["reply"], p["stopped"], p["n_predict"], end)
            assert (got.drafted, got.accepted) == (real[0]["drafted"], real[0]["accepted"]), (pid, mode)
            checked += 1
    assert checked >= least


@pytest.mark.skipif(not (NATIVE_BIN / nb.COMPLETION).is_file() or not (NATIVE_BIN / nb.SPECULATIVE).is_file(),
                    reason=f"llama.cpp's tools are not built in {NATIVE_BIN} (set SPECCHAT_NATIVE_BIN; see "
                           "docs/BENCHMARKS.md, \"Comparing with llama.cpp itself\")")
def test_replay_drafts_and_accepts_what_the_real_tool_did_in_the_research_bench(smol_path, tmp_path):
    """The research bench beside llama.cpp's tools, recording its corpus: each n-gram type's replay on the recorded
    reply drafts and accepts what llama-speculative-simple did on the same prompt tokens."""
    result = research_bench("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none",
                            "--native", NATIVE_BIN, "--native-modes", "ngram-simple,ngram-mod", "--repeat", 1,
                            "--no-warmup", "-c", 512, "--copy-bound", "--replay-out", tmp_path / "c.json",
                            home=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data["copy_bound"]["llama_cpp_replay"]) == {"echo", "turns"}
    corpus = json.loads((tmp_path / "c.json").read_text())
    checked = 0
    for run in data["runs"]:
        if run["mode"] in ("llama.cpp:ngram-simple", "llama.cpp:ngram-mod") and run["identical"]:
            p = corpus["prompts"][run["prompt_id"]]
            end = next((t for t in reversed(p["prompt"]) if t in corpus["eog"]), -1)
            got = nr.replay(run["mode"].removeprefix("llama.cpp:"), p["prompt"], p["reply"], p["stopped"],
                            p["n_predict"], end)
            assert (got.drafted, got.accepted) == (run["drafted"], run["accepted"]), run["prompt_id"]
            checked += 1
    assert checked, data["runs"]

"""The clairvoyant copy bound: what any copy drafter could gain on a reply with given row costs."""

from __future__ import annotations

import json

import pytest

from app.engine.draft_policy import COPY_MAX_AUTO, resolve_copies
from app.engine.drafters import LookupDrafter
from app.engine.events import FinishEvent, StepEvent
from app.engine.speculative import SpecEngine, SpecParams
from tests.research_bench import research_bench
from tests.test_bench import _suite
from tools.bench import copy_bound, policy_replay
from tools.bench.native_replay import REPLAYED


def test_copyable_counts_the_continuation_of_a_matching_earlier_spot():
    prompt = [10, 11, 1, 2, 3, 4, 5, 12]
    reply = [1, 2, 3, 4, 5, 7, 8]
    # reply[2] follows (1, 2), as prompt[4] does: 3, 4, 5 continue it, then the reply says 7 where it said 12.
    assert copyable_at(prompt, reply, 2) == 3
    assert copy_bound.copyable(prompt, reply)[:2] == [0, 0]  # (5, 12) and (12, 1) occur nowhere earlier
    # The reply's own text is context too: a repeat of its first tokens copies from the reply.
    again = [20, 21, 22, 23, 20, 21, 22, 23]
    assert copy_bound.copyable([9], again, key=2)[6] == 2  # (20, 21) -> 22, 23
    assert copy_bound.copyable(prompt, reply, longest=2)[2] == 2


def copyable_at(prompt, reply, i):
    return copy_bound.copyable(prompt, reply)[i]


def test_bound_is_one_when_rows_cost_their_count_and_grows_when_they_are_cheap():
    prompt = list(range(100, 130))
    reply = list(range(100, 130))  # the prompt again: copyable from reply[2] on, after (100, 101)
    linear = {r: float(r) for r in copy_bound.ROWS}
    assert copy_bound.bound(prompt, reply, linear) == pytest.approx(1.0)
    free = {r: 1.0 for r in copy_bound.ROWS}
    # Plain step for reply[1] (nothing to copy after (129, 100)), then one 28-row verify for the 28 others.
    assert copy_bound.bound(prompt, reply, free) == pytest.approx(29 / 2)
    # Nothing copyable: plain decoding is the best there is.
    assert copy_bound.bound([1, 2, 3], [4, 5, 6, 7, 8], free) == pytest.approx(1.0)


def test_row_costs_are_measured_on_the_real_target(smol_session):
    prompt = smol_session.chat_prompt([{"role": "user", "content": "Name three colours."}])
    costs = copy_bound.measure_row_costs(smol_session, prompt, rows=(1, 2, 8), repeats=2)
    assert set(costs) == {1, 2, 8} and costs[1] == 1.0 and all(c > 0 for c in costs.values())
    assert smol_session.target_ctx.n_past == 0  # caches left empty, as the bench's next run expects
    # llama.cpp's n-gram types verify up to 65 rows, more than SpecChat's context takes logits for (48): those
    # are timed in a wider context of the same model, and the session's own context is left as it was.
    own = smol_session.target_ctx
    assert own.max_rows < 64
    wide = copy_bound.measure_row_costs(smol_session, prompt, rows=(1, own.max_rows, 64), repeats=1)
    assert set(wide) == {1, own.max_rows, 64} and wide[64] > 0
    assert smol_session.target_ctx is own and own.max_rows < 64 and own.n_past == 0


def test_bench_cli_prints_each_prompts_copy_bound(smol_path, tmp_path):
    result = research_bench("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none",
                      "--repeat", 1, "--no-warmup", "-c", 512, "--copy-bound", home=tmp_path)
    assert result.returncode == 0, result.stderr
    bounds = json.loads(result.stdout)["copy_bound"]
    assert set(bounds["prompts"]) == {"echo", "turns"} and all(b >= 1.0 for b in bounds["prompts"].values())
    assert bounds["row_costs"]["1"] == 1.0 and bounds["key"] == copy_bound.KEY
    # No drafter beats the clairvoyant one on the same reply and costs; SpecChat's own lookup included.
    replayed = bounds["lookup_replay"]
    assert set(replayed) == set(bounds["prompts"])
    assert all(0 < replayed[pid] <= bounds["prompts"][pid] + 1e-3 for pid in replayed)
    # llama.cpp's n-gram types replayed on the same replies, with 48- and 64-row verifies timed, not guessed.
    assert {"48", "64"} <= set(bounds["row_costs"])
    assert set(bounds["llama_cpp_replay"]) == set(bounds["prompts"])
    assert all(set(types) == set(REPLAYED) and all(x > 0 for x in types.values())
               for types in bounds["llama_cpp_replay"].values())
    table = research_bench("bench", "--prompts", _suite(tmp_path), "-m", smol_path, "--modes", "none", "--repeat", 1,
                           "--no-warmup", "-c", 512, "--copy-bound", home=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "Copy bound" in table.stdout and "echo" in table.stdout
    assert "llama.cpp's n-gram types replayed alike on echo: ngram-simple" in table.stdout


def test_the_research_flags_are_the_research_benchs_not_the_products(capsys):
    """`specchat bench` (shipped) has no copy bound or replay corpus; `python -m tools.bench bench` has every flag
    of it and those."""
    from app.cli.main import build_parser
    from tools.bench.cli import build_parser as research_parser

    for flag in ("--copy-bound", "--replay-out=c.json"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", flag])
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    args = research_parser().parse_args(["bench", "--copy-bound", "--replay-out", "c.json", "--native", "bin",
                                         "--modes", "none", "--repeat", "1"])
    assert args.copy_bound and args.replay_out.name == "c.json" and args.native.name == "bin" and args.repeat == 1


CPU_SPEC = resolve_copies(SpecParams(copy_max=COPY_MAX_AUTO), target_on_gpu=False)  # what resolve_spec gives on the CPU


def test_replayed_plain_decoding_costs_one_step_per_decoded_token():
    prompt, reply = list(range(50, 70)), list(range(100, 110))
    one = {1: 1.0, 32: 32.0}
    # The first token comes from the prompt's pass; the other 9 take a step each, the end of turn one more.
    assert policy_replay.replay_ms(prompt, reply, True, one, "none", CPU_SPEC) == pytest.approx(10.0)
    assert policy_replay.replay_ms(prompt, reply, False, one, "none", CPU_SPEC) == pytest.approx(9.0)


def test_replayed_lookup_gains_where_rows_are_cheap_and_stays_under_the_bound():
    block = [(i * 7) % 97 + 200 for i in range(120)]  # 120 distinct-enough tokens to copy
    prompt = [1, 2, 3, *block, 4]
    reply = [*block[:60], 999, *block[61:]]  # the block again, one token edited
    free = {r: 1.0 + 0.02 * (r - 1) for r in copy_bound.ROWS}
    linear = {r: float(r) for r in copy_bound.ROWS}
    gain = policy_replay.replayed_speedup(prompt, reply, True, free, CPU_SPEC)
    assert 2.0 < gain <= copy_bound.bound(prompt, reply, free) + 1e-9
    # Where a row costs as much as a plain step, drafting can only lose what its rejected rows cost.
    assert policy_replay.replayed_speedup(prompt, reply, True, linear, CPU_SPEC) <= 1.0 + 1e-9


def test_the_stand_in_target_answers_each_row_with_the_next_recorded_token():
    target = policy_replay.StandInTarget([5, 6, 7], 8, {1: 1.0}, policy_replay.ReplayClock())
    target.decode([5, 6], logits_for="all")
    assert [int(target.logits(i).argmax()) for i in range(2)] == [6, 7]


EOT = 990  # the stand-ins' end-of-turn token
BLOCK = [(i * 7) % 97 + 200 for i in range(80)]
# A user message quoting a block, its end of turn and the next header; the reply repeats the block and ends.
QUOTING_PROMPT = [1, 2, *BLOCK, EOT, 5, 6]


def _steps(prompt: list[int], reply: list[int], n_predict: int) -> list[StepEvent]:
    clock = policy_replay.ReplayClock()
    target = policy_replay.StandInTarget([*prompt, *reply, EOT], EOT, copy_bound_costs(), clock)
    engine = SpecEngine(target, LookupDrafter(), clock=clock)  # type: ignore[arg-type]
    events = list(engine.generate(prompt, n_predict, spec=CPU_SPEC))
    finish = [e for e in events if isinstance(e, FinishEvent)]
    assert finish and list(finish[0].tokens) == reply and finish[0].stats.finish_reason == "stop"
    return [e for e in events if isinstance(e, StepEvent)]


def copy_bound_costs() -> dict[int, float]:
    return {r: 1.0 + 0.45 * (r - 1) for r in copy_bound.ROWS}  # cheap rows: long copies pay


def test_a_copy_never_drafts_past_the_end_of_turn_it_runs_into():
    steps = _steps(QUOTING_PROMPT, list(BLOCK), 400)
    assert any(s.copy for s in steps), "the block should be drafted as a running copy"
    last = steps[-1]
    # The copy reaches the quoted message's end of turn: it drafts it (the target agrees) and nothing after it,
    # where it would verify the next header's rows for nothing.
    assert EOT in last.drafted and last.drafted[-1] == EOT and last.accepted == len(last.drafted)
    assert all(EOT not in s.drafted[:-1] for s in steps)


def test_the_replay_pays_for_drafts_past_the_reply_when_given_the_real_budget():
    # The reply stops early, where the quoted block goes on: a copy runs past the reply's end, and only a replay
    # that knows the run's real budget pays for those rows, as the real run does.
    prompt, reply = [1, 2, *BLOCK, 3, 4], BLOCK[:40]
    costs = copy_bound_costs()
    told_the_length = policy_replay.replay_ms(prompt, reply, True, costs, "lookup", CPU_SPEC)
    real_budget = policy_replay.replay_ms(prompt, reply, True, costs, "lookup", CPU_SPEC, n_predict=400)
    assert real_budget > told_the_length
    # A reply cut by its budget had no room beyond it: the budget changes nothing.
    assert policy_replay.replay_ms(prompt, reply, False, costs, "lookup", CPU_SPEC, n_predict=400) == \
        policy_replay.replay_ms(prompt, reply, False, costs, "lookup", CPU_SPEC)

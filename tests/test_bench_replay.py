"""`python -m tools.bench bench-replay`: the lookup policy replayed on recorded replies with several cost tables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.cli.options import EXIT_BAD_INPUT, UserError
from app.engine.draft_policy import COPY_MAX_AUTO, SURE_COPY_LONG, resolve_copies
from app.engine.drafters import LookupDrafter
from app.engine.events import StepEvent
from app.engine.speculative import SpecEngine, SpecParams
from tests.research_bench import research_bench
from tests.test_bench import _suite
from tools.bench import policy_replay
from tools.bench.bench_replay import corpus, corpus_spec, parse_row_costs, write_corpus
from tools.bench.cli import main
from tools.bench.native_replay import REPLAYED

EOT = 9  # the template's end of turn: in the prompt, and what ends a reply that stopped
PASSAGE = list(range(100, 160))
CPU = {1: 1.0, 2: 1.8, 4: 2.8, 8: 6.9, 16: 8.5, 32: 14.5}


def _corpus(path: Path, name: str, costs: dict[int, float]) -> Path:
    prompts = {"copy": [1, 2, *PASSAGE, EOT, 3], "fresh": [1, 2, 5, 6, EOT, 3]}
    reply = SimpleNamespace(finish_reason="stop", n_predict=128)
    replies = {"copy": SimpleNamespace(token_ids=[*PASSAGE[:20], 77, *PASSAGE[21:]], **vars(reply)),
               "fresh": SimpleNamespace(token_ids=list(range(300, 340)), **vars(reply))}
    write_corpus(path, corpus(prompts, replies, costs, [EOT], SpecParams(copy_max=31, sure_copies=True),
                              {"cpu": "test"}, name))
    return path


def _replayed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["bench-replay", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_copied_reply_replays_faster_than_plain_and_fresh_text_at_plain_speed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _corpus(tmp_path / "here.json", "here", CPU)
    out = _replayed(capsys, str(path), "--row-costs", "gpu=1:1,2:1.02,32:1.6")
    assert out["tables"] == ["here", "gpu"]
    rows = {r["prompt_id"]: r["costs"] for r in out["rows"]}
    fresh = rows["fresh"]["here"]
    assert (fresh["lookup"], fresh["bound"]) == (1.0, 1.0)  # nothing to copy: plain steps
    assert fresh["llama.cpp"] == {mode: 1.0 for mode in REPLAYED}  # nor for llama.cpp's n-gram types
    copy = rows["copy"]
    assert 1.05 < copy["here"]["lookup"] <= copy["here"]["bound"]
    # Cheap rows make the same copy pay far more, for the policy and for the bound alike.
    assert copy["gpu"]["lookup"] > copy["here"]["lookup"] and copy["gpu"]["bound"] > copy["here"]["bound"]
    assert out["geomean"]["here"]["here"] == pytest.approx((copy["here"]["lookup"] * 1.0) ** 0.5, abs=1e-3)
    # llama.cpp's types copy the passage too, with a 12-token key; each table names the best and lookup's ratio to it.
    cpp = copy["gpu"]["llama.cpp"]
    assert max(cpp.values()) > 1.0 and cpp[copy["gpu"]["llama.cpp_best"]] == max(cpp.values())
    assert copy["gpu"]["vs_llama_cpp_best"] == pytest.approx(copy["gpu"]["lookup"] / max(cpp.values()), abs=1e-3)


def test_corpora_are_crossed_with_each_others_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _corpus(tmp_path / "a.json", "a", CPU)
    b = _corpus(tmp_path / "b.json", "b", {r: 1.0 + 0.02 * (r - 1) for r in (1, 2, 4, 8, 16, 32)})
    out = _replayed(capsys, str(a), str(b))
    assert out["tables"] == ["a", "b"] and len(out["rows"]) == 4
    assert {(r["corpus"], r["prompt_id"]) for r in out["rows"]} == {(c, p) for c in "ab" for p in ("copy", "fresh")}
    # The same reply on the same costs replays the same, whichever corpus brought it.
    by = {(r["corpus"], r["prompt_id"]): r["costs"] for r in out["rows"]}
    assert by[("a", "copy")] == by[("b", "copy")]
    assert main(["bench-replay", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "[a]" in text and "[b]" in text and "geometric mean [b]" in text


SURE_31 = SpecParams(copy_max=31, sure_copies=True)  # sure copies of at most 31 tokens


def _copy_steps(prompt: list[int], reply: list[int], clairvoyant: bool = False,
                spec: SpecParams = SURE_31) -> list[StepEvent]:
    clock = policy_replay.ReplayClock()
    target = policy_replay.StandInTarget([*prompt, *reply, EOT], EOT, CPU, clock, is_eog=EOT.__eq__)
    drafter = LookupDrafter()
    if clairvoyant:
        drafter.lookup = policy_replay.clairvoyant_lookup(target.sequence)
    engine = SpecEngine(target, drafter, clock=clock)  # type: ignore[arg-type]  # the stand-in context
    events = engine.generate(prompt, 400, spec=spec)
    return [e for e in events if isinstance(e, StepEvent) and e.copy]


def test_a_sure_copy_runs_longer_only_after_a_clean_one_and_only_on_auto() -> None:
    passage = list(range(100, 300))
    prompt = [1, 2, *passage, EOT, 3]
    auto = resolve_copies(SpecParams(copy_max=COPY_MAX_AUTO), target_on_gpu=False)
    assert auto.sure_copy_long == SURE_COPY_LONG > auto.copy_max
    # A verbatim copy: the first sure copy is cut at copy_max; once it was accepted whole, the next run longer.
    steps = [(len(e.drafted), e.accepted) for e in _copy_steps(prompt, passage, spec=auto)]
    assert steps[0] == (auto.copy_max, auto.copy_max) and steps[1] == (SURE_COPY_LONG, SURE_COPY_LONG)
    # An explicit K bounds them all.
    assert max(len(e.drafted) for e in _copy_steps(prompt, passage, spec=replace(auto, sure_copy_long=0))) == 31
    # A copy that broke off (the reply inserts a token) is not clean: the one after it stays at copy_max.
    broken = [(len(e.drafted), e.accepted) for e in _copy_steps(prompt, [*passage[:40], 77, *passage[40:]], spec=auto)]
    assert broken[0][1] < broken[0][0] and broken[1][0] <= auto.copy_max
    assert max(n for n, _ in broken) == SURE_COPY_LONG  # clean again, longer again


def test_old_corpora_replay_with_todays_auto(tmp_path: Path) -> None:
    """A corpus written before sure_copy_long holds what "auto" resolved to then; one written now records it."""
    assert corpus_spec({"copy_max": 31, "sure_copies": True}) == resolve_copies(SpecParams(copy_max=COPY_MAX_AUTO),
                                                                                target_on_gpu=False)
    assert corpus_spec({"copy_max": 31, "sure_copies": False}).sure_copy_long == 0  # governed on a GPU
    assert corpus_spec({"copy_max": 15, "sure_copies": True}) == SpecParams(copy_max=15, sure_copies=True)
    recorded = json.loads(_corpus(tmp_path / "now.json", "now", CPU).read_text(encoding="utf-8"))["spec"]
    assert corpus_spec(recorded) == SpecParams(copy_max=31, sure_copies=True)  # what _corpus ran with


def test_clairvoyant_sure_copies_stop_exactly_where_the_reply_parts_and_pay_more(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The reply inserts a token (77) before the passage's first 500 and copies the rest, its second 500 included.
    passage = [*range(100, 130), 500, *range(130, 170), 500, *range(170, 230)]
    prompt = [1, 2, *passage, EOT, 3]
    reply = [*passage[:30], 77, *passage[30:]]
    seer = _copy_steps(prompt, reply, clairvoyant=True)
    assert seer and all(e.accepted == len(e.drafted) for e in seer)
    # Today's rule cannot know where the insertion comes: its first sure copy runs into it.
    assert any(e.accepted < len(e.drafted) for e in _copy_steps(prompt, reply, clairvoyant=False))
    costs = CPU
    spec = SpecParams(copy_max=31, sure_copies=True)
    speedups = policy_replay.replayed_speedups(prompt, reply, True, costs, spec, 256, EOT.__eq__,
                                               modes=("lookup", "clairvoyant"))
    assert speedups["clairvoyant"] > speedups["lookup"] > 1.0
    with pytest.raises(ValueError, match="clairvoyant"):
        policy_replay.replay_ms(prompt, reply, True, costs, "psychic", spec)
    # bench-replay --clairvoyant: a third table, and each cell's own numbers.
    path = _corpus(tmp_path / "here.json", "here", CPU)
    out = _replayed(capsys, str(path), "--clairvoyant")
    cells = {r["prompt_id"]: r["costs"]["here"] for r in out["rows"]}
    assert cells["fresh"]["clairvoyant"] == 1.0 and cells["copy"]["clairvoyant"] >= cells["copy"]["lookup"]
    assert out["geomean_clairvoyant_vs_llama_cpp_best"]["here"]["here"] > 0
    assert main(["bench-replay", str(path), "--clairvoyant"]) == 0
    assert "clairvoyant sure-copy cuts" in capsys.readouterr().out
    assert "clairvoyant" not in json.dumps(_replayed(capsys, str(path)))  # only when asked: it doubles the time


def test_bad_input_names_the_file_or_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"runs": []}), encoding="utf-8")
    assert main(["bench-replay", str(report)]) == EXIT_BAD_INPUT
    assert "report.json: not a replay corpus" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    assert main(["bench-replay", str(broken)]) == EXIT_BAD_INPUT
    assert "broken.json: not JSON" in capsys.readouterr().err
    with pytest.raises(UserError, match="must price one row at 1"):
        parse_row_costs("x=2:1.8,4:2.8")
    with pytest.raises(UserError, match="'4-2.8' is not ROWS:COST"):
        parse_row_costs("x=1:1,4-2.8")
    with pytest.raises(UserError, match="needs a name"):
        parse_row_costs("1:1,4:2.8")
    assert parse_row_costs(" run4 =1:1,4:2.22") == ("run4", {1: 1.0, 4: 2.22})
    path = _corpus(tmp_path / "same.json", "same", CPU)
    assert main(["bench-replay", str(path), "--row-costs", "same=1:1,2:1.8"]) == EXIT_BAD_INPUT
    assert "same name" in capsys.readouterr().err


def test_bench_replay_out_records_a_corpus_that_bench_replay_replays(smol_path, tmp_path):
    corpus_file = tmp_path / "corpus.json"
    report_file = tmp_path / "report.json"
    result = research_bench("bench", "--prompts", _suite(tmp_path), "-m", smol_path, "--modes", "none", "--repeat",
                            1, "--no-warmup", "-c", 512, "--json-out", report_file, "--replay-out", corpus_file,
                            "--replay-name", "smol", home=tmp_path)
    assert result.returncode == 0, result.stderr
    corpus = json.loads(corpus_file.read_text())
    runs = {r["prompt_id"]: r for r in json.loads(report_file.read_text())["runs"]}
    assert corpus["name"] == "smol" and set(corpus["prompts"]) == set(runs) == {"echo", "turns"}
    # Measured costs, in plain steps: whether 4 rows cost more than 1 follows the machine's load, not the code.
    assert corpus["row_costs"]["1"] == 1.0 and float(corpus["row_costs"]["4"]) > 0
    assert corpus["eog"]  # the template's end-of-turn ids, from the prompts
    for pid, p in corpus["prompts"].items():
        assert len(p["prompt"]) == runs[pid]["prompt_tokens"] and len(p["reply"]) == runs[pid]["tokens"]
        assert p["stopped"] == (runs[pid]["finish_reason"] == "stop") and p["n_predict"] == runs[pid]["n_predict"]
    # The replay drives the real engine and must write each recorded reply again, or it fails.
    replayed = research_bench("bench-replay", corpus_file, "--json", home=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    rows = json.loads(replayed.stdout)["rows"]
    assert {r["prompt_id"] for r in rows} == {"echo", "turns"}
    assert all(r["costs"]["smol"]["lookup"] > 0.5 and r["costs"]["smol"]["bound"] >= 1.0 for r in rows)

"""`python -m tools.bench bench-pool`: rounds of several bench reports pooled into one interval per prompt and mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.ratio_stats import ratio_interval
from tools.bench.cli import main

SETTINGS = {"n_ctx": 4096, "n_threads": 2, "flash_attn": True, "repack": True, "n_batch": 512,
            "sampling": {"temperature": 0.0}, "spec": {"draft_max": 6}, "processes": "fresh"}


def _report(path: Path, rounds: dict[tuple[str, str], list[float]], **settings: Any) -> Path:
    runs = [{"prompt_id": p, "mode": m, "rounds_tps": tps} for (p, m), tps in rounds.items()]
    report = {"models": {"target": f"/somewhere/{path.stem}/target.gguf", "draft": None},
              "settings": {**SETTINGS, **settings}, "native": {"version": "0.5.0-dev"}, "runs": runs}
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def _pooled(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["bench-pool", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_rounds_are_pooled_as_ratios_taken_within_each_report(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # The machine ran at another speed on the second day: only same-round ratios may be pooled, never raw tok/s.
    a = _report(tmp_path / "a.json", {
        ("p", "llama.cpp:plain"): [20.0, 22.0, 21.0], ("p", "lookup"): [19.0, 22.0, 21.5],
        ("q", "llama.cpp:plain"): [25.0, 24.0, 26.0], ("q", "lookup"): [30.0, 29.0, 33.0]})
    b = _report(tmp_path / "b.json", {("p", "llama.cpp:plain"): [30.0, 31.0], ("p", "lookup"): [28.0, 30.5]})
    out = _pooled(capsys, str(a), str(b))
    assert out["base"] == "llama.cpp:plain"
    rows = {(r["prompt_id"], r["mode"]): r for r in out["rows"]}
    assert set(rows) == {("p", "lookup"), ("q", "lookup")}  # the base is not a row of its own
    expected = [19 / 20, 22 / 22, 21.5 / 21, 28 / 30, 30.5 / 31]
    p = rows[("p", "lookup")]
    assert (p["reports"], p["rounds"]) == (2, 5)
    assert p["interval"] == pytest.approx(ratio_interval(expected))
    assert p["median"] == pytest.approx(sorted(expected)[2])
    assert rows[("q", "lookup")]["rounds"] == 3
    # The "never slower" bar is about the worst prompt: p, not q.
    assert out["worst"]["lookup"]["prompt_id"] == "p"


def test_the_table_names_each_row_and_the_worst_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _report(tmp_path / "a.json", {("p", "none"): [20.0, 21.0], ("p", "lookup"): [24.0, 25.0]})
    assert main(["bench-pool", str(a)]) == 0
    text = capsys.readouterr().out
    assert "ratios to none" in text  # no llama.cpp rows: the base falls back to SpecChat's plain path
    assert "lookup: lowest on p, 1.19" in text


def test_reports_of_other_settings_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rounds = {("p", "llama.cpp:plain"): [20.0, 21.0], ("p", "none"): [20.5, 20.0]}
    a = _report(tmp_path / "a.json", rounds)
    b = _report(tmp_path / "b.json", {("p", "llama.cpp:plain"): [22.0, 21.0], ("p", "none"): [20.5, 21.0]},
                n_threads=4)
    assert main(["bench-pool", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "b.json was measured with other n_threads than" in err and "a.json" in err and "4 against 2" in err


def test_the_same_rounds_twice_and_files_that_are_no_report_are_refused(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rounds = {("p", "llama.cpp:plain"): [20.0, 21.0], ("p", "none"): [20.5, 20.0]}
    a = _report(tmp_path / "a.json", rounds)
    copy = tmp_path / "copy.json"
    copy.write_text(a.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["bench-pool", str(a), str(copy)]) == 2
    assert "copy.json holds the same rounds as" in capsys.readouterr().err

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n', encoding="utf-8")
    assert main(["bench-pool", str(prompts)]) == 2
    assert "prompts.jsonl is not JSON" in capsys.readouterr().err

    other = tmp_path / "other.json"
    other.write_text('{"rows": []}', encoding="utf-8")
    assert main(["bench-pool", str(other)]) == 2
    assert "other.json is not a bench report" in capsys.readouterr().err

    assert main(["bench-pool", str(a), "--base", "hybrid"]) == 2
    assert "no report ran the base mode 'hybrid'" in capsys.readouterr().err

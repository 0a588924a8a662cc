"""`specchat bench-serve` on SmolLM2-135M: two tiny requests, one round, 16 tokens; its JSON report holds every column
and every round's numbers. With llama.cpp's llama-server too where /work/native/build/bin (or $SPECCHAT_NATIVE_BIN)
holds one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from app.cli.bench_serve import OPENAI_MISSING, load_requests
from app.cli.main import main
from app.cli.options import UserError

NATIVE = Path(os.environ.get("SPECCHAT_NATIVE_BIN", "/work/native/build/bin"))
FILE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
ROWS = [{"id": "edit-tiny", "kind": "edit", "lang": "python", "instruction": "Rename `add` to `plus`.", "file": FILE},
        {"id": "chat-tiny", "kind": "chat", "prompt": "Name a colour."}]


def _run(tmp_path: Path, smol: Path, *extra: str) -> dict[str, Any]:
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "report.json"
    status = main(["bench-serve", "-m", str(smol), "--mode", "lookup", "-t", "2", "-c", "1024", "--rounds", "1",
                   "--max-tokens", "16", "--requests", str(requests), "--json-out", str(out), *extra])
    assert status == 0
    return dict(json.loads(out.read_text()))


def _check(report: dict[str, Any], columns: list[str]) -> None:
    assert report["columns"] == columns
    assert report["settings"]["max_tokens"] == 16 and report["settings"]["rounds"] == 1
    assert report["machine"]["cpu_logical"] >= 1 and report["models"]["target"].endswith(".gguf")
    # edit: every column; chat: all but specchat+prediction (it would be specchat again)
    expected = {("edit-tiny", c) for c in columns} | {("chat-tiny", c) for c in columns if c != "specchat+prediction"}
    assert {(c["request"], c["column"]) for c in report["calls"]} == expected
    assert {(r["request"], r["column"]) for r in report["results"]} == expected
    for call in report["calls"]:
        assert call["round"] == 0 and 1 <= call["completion_tokens"] <= 16
        assert call["wall_s"] > 0 and call["tokens_per_second"] > 0 and call["server_tokens_per_second"] >= 0
        assert call["text"]
        if call["column"].startswith("specchat"):
            assert call["cached_tokens"] == 0  # cache_prompt false: the same prompt again is processed whole
            assert call["specchat"]["mode"] == "lookup"
            assert call["accepted_prediction_tokens"] is not None and call["rejected_prediction_tokens"] is not None
    specchat = {r["request"]: r for r in report["results"] if r["column"] == "specchat"}
    assert all(r["vs_specchat"] == 1.0 and r["same_as_specchat"] for r in specchat.values())
    for kind in ("edit", "chat"):
        assert report["summary"]["specchat"][kind]["requests"] == 1
    for row in report["results"]:  # greedy: a reply that parts is placed against the target's plain reply
        texts = {c["text"] for c in report["calls"] if c["request"] == row["request"]}
        parting = row["parts_from_plain"]
        assert parting is None if len(texts) == 1 else parting is None or isinstance(parting["near_tie"], bool)


def test_bench_serve_report(tmp_path: Path, smol_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    report = _run(tmp_path, smol_path)
    _check(report, ["specchat", "specchat+prediction"])
    shown = capsys.readouterr().out
    assert "edit-tiny" in shown and "specchat+prediction" in shown and "same as specchat" in shown


@pytest.mark.skipif(not (NATIVE / "llama-server").is_file(), reason=f"no llama-server in {NATIVE}")
def test_bench_serve_with_llama_server(tmp_path: Path, smol_path: Path) -> None:
    pytest.importorskip("openai")
    report = _run(tmp_path, smol_path, "--native", str(NATIVE), "--native-spec", "ngram-map-k")
    _check(report, ["specchat", "specchat+prediction", "llama-server", "llama-server+ngram-map-k"])
    assert report["native"]["spec_types"] == ["ngram-map-k"]
    assert "--spec-type" in report["native"]["commands"]["llama-server+ngram-map-k"]
    rows = {(r["request"], r["column"]): r for r in report["results"]}
    assert rows[("edit-tiny", "llama-server")]["vs_llama_server"] == 1.0
    assert rows[("edit-tiny", "llama-server+ngram-map-k")]["vs_specchat"] is not None


def test_without_openai_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    assert main(["bench-serve", "-m", "missing.gguf"]) == 2
    assert capsys.readouterr().err.strip() == f"specchat: error: {OPENAI_MISSING}"


def test_requests_file_errors_name_the_line(tmp_path: Path) -> None:
    assert [r.kind for r in load_requests(None)].count("edit") >= 6  # the built-in set
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"id": "x", "kind": "edit", "lang": "go"}) + "\n")
    with pytest.raises(UserError, match="line 2: \"instruction\""):
        load_requests(bad)
    bad.write_text(json.dumps(ROWS[1]) + "\n" + json.dumps(ROWS[1]) + "\n")
    with pytest.raises(UserError, match="line 2: the id 'chat-tiny' repeats"):
        load_requests(bad)


def test_first_difference_names_line_and_column() -> None:
    from app.cli.bench_serve import first_difference

    assert first_difference("a\nbc", "a\nbc") is None
    d = first_difference("def f():\n    return x\n", "def f():\n    return y\n")
    assert d is not None and (d["line"], d["column"], d["char"]) == (2, 12, 20)
    assert d["specchat"] == "x\n" and d["this"] == "y\n"
    assert first_difference("abc", "ab") == {"char": 2, "line": 1, "column": 3, "specchat": "c", "this": ""}


def test_plain_parting_names_the_token_and_its_margin() -> None:
    """A reply that parts from the target's plain reply is placed at the plain reply's token (the first of the
    tokens that complete a multi-byte character), with the margin there: a near-tie under parting's bound, a real
    difference above it, and no margin past the plain reply's end."""
    from app.cli.bench_serve import plain_parting

    pieces, margins = ["Hello", ",", " wor", "ld"], [2.0, 0.05, 1.0, 3.0]
    assert plain_parting(pieces, margins, "Hello, world") is None
    near = plain_parting(pieces, margins, "Hello; world")
    assert near is not None and (near["token"], near["char"], near["margin"], near["near_tie"]) == (1, 5, 0.05, True)
    real = plain_parting(pieces, margins, "Hello, word")
    assert real is not None and (real["token"], real["margin"], real["near_tie"]) == (3, 3.0, False)
    split = plain_parting(["a", "", "\u00e9", "b"], [1.0, 0.01, 2.0, 1.0], "ax")
    assert split is not None and split["token"] == 1 and split["near_tie"]
    longer = plain_parting(["ab"], [1.0], "abc")
    assert longer is not None and longer["token"] == 1 and longer["margin"] is None and not longer["near_tie"]

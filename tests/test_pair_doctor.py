"""The pair doctor: llama.cpp's compatibility rules plus the extras, on real and tiny GGUFs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from tiny_gguf import VOCAB, write_tiny

from app.cli.models import register
from app.models.gguf_meta import read_tokens
from app.models.pair_doctor import PairReport, check_pair


def codes(report: PairReport, severity: str) -> set[str]:
    return {f.code for f in report.findings if f.severity == severity}


def message(report: PairReport, code: str) -> str:
    return next(f.message for f in report.findings if f.code == code)


def test_qwen_pair_is_compatible(target_path: Path, draft_path: Path) -> None:
    report = check_pair(target_path, draft_path)
    assert report.compatible, report.findings
    assert not codes(report, "blocks")
    assert report.size_ratio == pytest.approx(0.355, abs=0.01)
    assert "size" in codes(report, "warns")  # 0.63B vs 1.78B: less than 3x smaller
    assert report.reason is None


def test_smollm2_with_qwen_is_blocked(target_path: Path, smol_path: Path) -> None:
    report = check_pair(target_path, smol_path)
    assert not report.compatible
    assert {"vocab-size", "token-text"} <= codes(report, "blocks")
    assert message(report, "vocab-size").startswith("vocab sizes 151,936 vs 49,152")
    assert message(report, "token-text") == "token 5 differs: '&' vs '<file_sep>'"
    assert report.reason is not None and "151,936" in report.reason
    assert {"architecture", "context"} <= codes(report, "warns")


def test_first_mismatching_token_is_named(tmp_path: Path, target_path: Path) -> None:
    """The issue's own example: a draft whose token 151,646 reads differently."""
    tokens = read_tokens(target_path)
    tokens[151646] = "<|endoftext|>"
    qwen = {"tokenizer.ggml.bos_token_id": 151643, "tokenizer.ggml.eos_token_id": 151645}
    draft = write_tiny(tmp_path / "draft.gguf", arch="qwen2", tokens=tokens, n_embd=32, extra=qwen)
    report = check_pair(target_path, draft)
    assert not report.compatible
    assert report.reason == "token 151,646 differs: '<|object_ref_start|>' vs '<|endoftext|>'"


def pair(tmp_path: Path, target: dict | None = None, draft: dict | None = None) -> PairReport:
    t = write_tiny(tmp_path / "t.gguf", **(target or {}))
    d = write_tiny(tmp_path / "d.gguf", n_embd=32, **(draft or {}))
    return check_pair(t, d)


def test_tokens_below_5_are_not_compared(tmp_path: Path) -> None:
    tokens = ["x0", "x1", "x2", "x3", "x4", *VOCAB[5:]]
    assert pair(tmp_path, draft={"tokens": tokens}).compatible


def test_vocab_size_tolerance(tmp_path: Path) -> None:
    big = VOCAB + [f"extra{i}" for i in range(128)]
    report = pair(tmp_path, target={"tokens": big})
    assert report.compatible and "vocab-size" in codes(report, "informs")
    report = pair(tmp_path, target={"tokens": [*big, "one too many"]})
    assert not report.compatible and message(report, "vocab-size").startswith("vocab sizes 161 vs 32")


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"tokenizer.ggml.model": "llama"}, "vocab-type"),
        ({"tokenizer.ggml.add_bos_token": True}, "bos"),
        ({"tokenizer.ggml.add_eos_token": True}, "eos"),
    ],
)
def test_llama_cpp_rules_block(tmp_path: Path, extra: dict, code: str) -> None:
    report = pair(tmp_path, draft={"extra": extra})
    assert not report.compatible and code in codes(report, "blocks")


def test_bos_id_matters_only_when_added(tmp_path: Path) -> None:
    assert pair(tmp_path, draft={"extra": {"tokenizer.ggml.bos_token_id": 3}}).compatible
    both = {"tokenizer.ggml.add_bos_token": True}
    report = pair(
        tmp_path, target={"extra": both}, draft={"extra": {**both, "tokenizer.ggml.bos_token_id": 3}}
    )
    assert not report.compatible and "bos" in codes(report, "blocks")


def test_doctor_extras_warn(tmp_path: Path) -> None:
    report = pair(
        tmp_path,
        target={"extra": {"llama.context_length": 4096}},
        draft={"arch": "gpt2", "template": "<start_of_turn>user {{ m }}<end_of_turn>"},
    )
    assert report.compatible  # none of these break exactness
    assert {"architecture", "chat-template", "context"} <= codes(report, "warns")


def test_same_file(tmp_path: Path) -> None:
    t = write_tiny(tmp_path / "t.gguf")
    report = check_pair(t, t)
    assert report.compatible and codes(report, "warns") == {"same-file"}


def test_unreadable_files_are_findings(tmp_path: Path, target_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_text("hello")
    report = check_pair(target_path, junk)
    assert not report.compatible and codes(report, "blocks") == {"unreadable-draft"}
    assert str(junk) in (report.reason or "") and "not a GGUF" in (report.reason or "")
    report = check_pair(tmp_path / "missing.gguf", target_path)
    assert codes(report, "blocks") == {"unreadable-target"}
    json.dumps(report.to_json())


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specchat")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_check_pair(target_path: Path, draft_path: Path, smol_path: Path, tmp_path: Path, capsys) -> None:
    assert run_cli(["check-pair", str(target_path), str(draft_path)]) == 0
    assert "verdict compatible" in capsys.readouterr().out
    assert run_cli(["check-pair", str(target_path), str(smol_path)]) == 2
    captured = capsys.readouterr()
    assert "vocab sizes 151,936 vs 49,152" in captured.err and "Traceback" not in captured.err
    assert run_cli(["check-pair", "--json", str(target_path), str(smol_path)]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] is False and data["findings"][0]["severity"] == "blocks"
    assert run_cli(["check-pair", str(tmp_path / "nope.gguf"), str(draft_path)]) == 2
    assert "no such file" in capsys.readouterr().err

"""The model library lists every GGUF it finds and turns unreadable files into entries, not crashes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from tiny_gguf import write_tiny

from app.cli.models import register
from app.models.library import describe, list_models


@pytest.fixture
def library(tmp_path: Path, target_path: Path, draft_path: Path, smol_path: Path) -> Path:
    root = tmp_path / "models"
    (root / "sub").mkdir(parents=True)
    (root / target_path.name).symlink_to(target_path)
    (root / "sub" / draft_path.name).symlink_to(draft_path)
    (root / "same-as-target.gguf").symlink_to(target_path)  # one real file, listed once
    (root / "sub" / smol_path.name).symlink_to(smol_path)
    (root / "notes.txt").write_text("not a model")
    (root / "junk.gguf").write_text("not a model either")
    with open(smol_path, "rb") as src:
        (root / "cut.gguf").write_bytes(src.read(3 << 20))
    (root / "big.gguf.part").write_bytes(b"GGUF")  # a download in progress: ignored
    (root / "split-00002-of-00003.gguf").write_bytes(b"")  # later shard: llama.cpp opens the first
    (root / ".hidden").mkdir()
    write_tiny(root / ".hidden" / "ignored.gguf")
    return root


def test_lists_real_models_and_errors(library: Path) -> None:
    entries = list_models([library])
    ok = [e for e in entries if e.ok]
    bad = [e for e in entries if not e.ok]
    assert sorted(e.info.architecture for e in ok) == ["llama", "qwen2", "qwen2"]
    assert {e.path.name for e in bad} == {"junk.gguf", "cut.gguf"}
    assert entries[: len(ok)] == ok  # readable first
    errors = {e.path.name: e.error or "" for e in bad}
    assert "not a GGUF" in errors["junk.gguf"] and "truncated" in errors["cut.gguf"]
    qwen = next(e for e in ok if e.info.n_layer == 28)
    row = qwen.to_json()
    assert row["quantisation"] == "Q4_K_M" and row["context_length"] == 32768
    assert row["architecture"] == "qwen2" and len(row["tokenizer_fingerprint"]) == 16
    assert row["size"] == 1_117_320_768
    json.dumps([e.to_json() for e in entries])


def test_folders_and_files(tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "does-not-exist-yet"))
    assert list_models() == []  # the default folder appears with the first download
    entries = list_models(extra_folders=[tmp_path / "gone"], files=[library / "junk.gguf"])
    errors = {e.path.name: e.error or "" for e in entries}
    assert list(errors) == ["gone", "junk.gguf"] and "folder does not exist" in errors["gone"]
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(library))
    assert len([e for e in list_models(recursive=False) if e.ok]) == 1  # sub/ not scanned
    assert describe(tmp_path / "missing.gguf").error


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any folder")
def test_unreadable_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        entries = list_models(extra_folders=[locked])
        assert len(entries) == 1 and "cannot read folder" in (entries[0].error or "")
    finally:
        locked.chmod(0o755)


def test_cli_models_list(library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(library))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-hf-cache"))  # the list shows the hub cache too
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    parser = argparse.ArgumentParser(prog="specchat")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "list", "--json"])
    assert args.func(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len([r for r in rows if r["error"] is None]) == 3
    args = parser.parse_args(["models", "list"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out and "! junk.gguf" in out and "32,768" in out

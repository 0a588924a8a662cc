"""`specchat models list` shows the Hugging Face cache's GGUF files, marked with their repository.

Files get into the cache through the real huggingface_hub client (`specchat models pull`) from the
local Hub of tests/hub_server.py, and the listing comes from huggingface_hub's own cache scan.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hub_server import FakeHub

from app import paths
from app.cli.main import main as cli
from app.models import hub
from app.models.library import list_models

REPO = "test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BROKEN_REPO = "test/broken-GGUF"


@pytest.fixture(scope="module")
def fake_hub(smol_path: Path) -> FakeHub:
    fh = FakeHub()
    fh.add_repo(REPO, {FILE: smol_path, "README.md": b"# SmolLM2 GGUF\n"})
    fh.add_repo(BROKEN_REPO, {"broken.gguf": b"GGUF" + bytes(4000)})
    fh.start()
    yield fh
    fh.stop()


@pytest.fixture
def env(fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh profile and an empty Hugging Face cache; returns the cache folder."""
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECCHAT_MODELS_DIR", raising=False)
    return tmp_path / "hf" / "hub"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli(argv) == 0
    return capsys.readouterr().out


def test_pulled_files_are_listed_as_hub_cache_files(env: Path, smol_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert "No GGUF files in" in run(["models", "list"], capsys)
    assert "Hugging Face cache" in run(["models", "list"], capsys)  # says where it looked
    pulled = json.loads(run(["models", "pull", REPO, FILE, "--json"], capsys))
    run(["models", "pull", BROKEN_REPO, "broken.gguf"], capsys)
    models = paths.models_dir()  # and a local copy of the same model
    models.mkdir(parents=True)
    shutil.copy(smol_path, models / FILE)

    rows = json.loads(run(["models", "list", "--json"], capsys))
    cached = [r for r in rows if r["source"] == "hf-cache"]
    local = [r for r in rows if r["source"] == "local"]
    assert [r["path"] for r in local] == [str(models / FILE)] and local[0]["hub"] is None
    smol = next(r for r in cached if r["file"] == FILE)
    snapshot = env / f"models--{REPO.replace('/', '--')}" / "snapshots" / pulled["commit"] / FILE
    assert smol["path"] == str(snapshot) == pulled["path"]
    assert smol["hub"] == {"repo_id": REPO, "filename": FILE, "revision": pulled["commit"], "refs": ["main"]}
    assert smol["architecture"] == "llama" and smol["error"] is None
    broken = next(r for r in cached if r["file"] == "broken.gguf")  # shown with its reason, not hidden
    assert broken["hub"]["repo_id"] == BROKEN_REPO and "GGUF" in broken["error"]
    assert len(rows) == 3

    text = run(["models", "list"], capsys).splitlines()
    assert text[0].split() == ["file", "arch", "params", "quant", "context", "size", "tokenizer", "source"]
    assert any(line.startswith(FILE) and line.endswith(f"hf-cache {REPO}") for line in text)
    assert any(line.startswith(FILE) and line.endswith("local") for line in text)
    assert any(line.startswith("! broken.gguf") for line in text)
    assert text[-1].startswith(f"hf-cache: in the Hugging Face cache {env}")


def test_a_cache_file_found_by_a_folder_scan_is_listed_once_and_marked(env: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The picker scans the cache folder itself: the same real file is one entry, with its repository."""
    run(["models", "pull", REPO, FILE], capsys)
    cached = hub.cached_gguf()
    assert [(c.repo_id, c.filename) for c in cached] == [(REPO, FILE)]  # README.md is not a model
    entries = list_models([env], hub_files=cached)
    assert len(entries) == 1 and entries[0].hub == cached[0] and entries[0].ok
    assert list_models([env])[0].hub is None  # the mark comes from the hub scan, not the path

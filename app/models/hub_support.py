"""What a Hub download needs besides huggingface_hub: errors, progress, verification, sidecars.

Kept apart from `app.models.hub` (the one module importing huggingface_hub) so that module stays short and
these pieces can be tested without a network. Nothing here imports huggingface_hub.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.atomic import atomic_write_text

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_HASH_CHUNK = 8 << 20
_EMIT_EVERY_S = 0.1


class HubError(Exception):
    """A Hub operation failed; the message names the repository or file and what to do."""


class HubNotFound(HubError):
    pass


class HubAuthError(HubError):
    pass


class HubCancelled(HubError):
    pass


class HubIntegrityError(HubError):
    pass


@dataclass(frozen=True)
class DownloadProgress:
    filename: str
    done: int
    total: int | None
    speed: float  # bytes per second, smoothed
    eta_s: float | None
    phase: Literal["download", "verify", "done"]
    resumed_from: int = 0


ProgressFn = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class CachedGGUF:
    """A GGUF file in huggingface_hub's cache, as its own cache scan describes it."""

    path: Path  # the snapshot path (a link to the blob): the name llama.cpp is given
    repo_id: str
    filename: str  # path inside the repository
    revision: str  # commit hash
    refs: tuple[str, ...]  # branches or tags pointing at that revision ("main")

    def to_json(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "filename": self.filename, "revision": self.revision, "refs": list(self.refs)}


class Tracker:
    """Bytes, speed and time left for one file; also the cancellation point (between chunks)."""

    def __init__(self, filename: str, total: int | None, callback: ProgressFn | None,
                 cancel: threading.Event | None) -> None:  # fmt: skip
        self.filename, self.total, self.callback, self.cancel = filename, total, callback, cancel
        self.done = self.resumed_from = self.transferred = 0
        self.speed = 0.0
        self._last_t = time.monotonic()
        self._last_done = 0

    def start(self, have: int) -> None:
        self.done = self.resumed_from = self._last_done = have
        self._check_cancel()
        self._emit("download", force=True)

    def add(self, n: int) -> None:
        self.done += n
        self.transferred += max(n, 0)
        self._check_cancel()
        self._emit("download")

    def verifying(self, done: int, total: int) -> None:
        self._check_cancel()
        if self.callback:
            self.callback(DownloadProgress(self.filename, done, total, 0.0, None, "verify", self.resumed_from))

    def finish(self) -> None:
        if self.callback:
            total = self.total if self.total is not None else self.done
            self.callback(DownloadProgress(self.filename, total, total, self.speed, 0.0, "done", self.resumed_from))

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise HubCancelled(
                f"{self.filename}: download cancelled; the {self.done / 1e6:.0f} MB received are kept, "
                "start it again to resume"
            )

    def _emit(self, phase: Literal["download"], force: bool = False) -> None:
        now = time.monotonic()
        dt = now - self._last_t
        if not force and dt < _EMIT_EVERY_S and self.done != self.total:
            return
        if dt > 0 and not force:
            rate = (self.done - self._last_done) / dt
            self.speed = rate if self.speed == 0 else 0.7 * self.speed + 0.3 * rate
        self._last_t, self._last_done = now, self.done
        eta = (self.total - self.done) / self.speed if self.total and self.speed > 0 else None
        if self.callback:
            self.callback(DownloadProgress(self.filename, self.done, self.total, self.speed, eta, phase,
                                           self.resumed_from))  # fmt: skip

    def bar_class(self) -> type:
        """A tqdm stand-in for `http_get`: it reports to us instead of drawing a bar."""
        tracker = self

        class _Bar:
            def __init__(self, *args: Any, initial: int = 0, **kwargs: Any) -> None:
                if initial != tracker.done:  # the server ignored Range and http_get restarted from 0
                    tracker.done = tracker._last_done = initial

            def __enter__(self) -> _Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def update(self, n: float | None = 1) -> None:
                tracker.add(int(n or 0))

            def close(self) -> None:
                pass

        return _Bar


def verify_file(partial: Path, etag: str, size: int | None, tracker: Tracker, filename: str) -> None:
    actual_size = partial.stat().st_size
    if size is not None and actual_size != size:
        raise HubError(f"{filename}: got {actual_size:,} of {size:,} bytes; run again to resume")
    if SHA256_RE.match(etag):
        digest, kind = hashlib.sha256(), "SHA-256"
    elif GIT_SHA1_RE.match(etag):  # a small file kept in git: its ETag is the git blob id
        digest, kind = hashlib.sha1(f"blob {actual_size}\0".encode()), "git SHA-1"
    else:
        return  # nothing to check against (a non-Hub ETag)
    done = 0
    with open(partial, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            tracker.verifying(done, actual_size)
    if digest.hexdigest() != etag:
        partial.unlink(missing_ok=True)
        raise HubIntegrityError(
            f"{filename}: {kind} mismatch (the Hub says {etag}, the download is {digest.hexdigest()}); "
            "the corrupt download was deleted and nothing was installed; run again"
        )


def sidecar_path(path: Path) -> Path:
    """Beside a file in the models folder: where it came from and the size/mtime it had when verified."""
    return path.with_name(f".{path.name}.hub.json")


def read_sidecar(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    return None


def sidecar_matches(path: Path, record: dict[str, Any]) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return bool(record.get("size") == st.st_size and record.get("mtime_ns") == st.st_mtime_ns)


def write_sidecar(path: Path, record: dict[str, Any]) -> None:
    st = path.stat()
    with contextlib.suppress(OSError):  # a read-only folder only costs a rehash next time
        atomic_write_text(sidecar_path(path), json.dumps({**record, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))

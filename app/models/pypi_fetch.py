"""Fetch files from a PEP 691 (JSON simple API) package index: lookup and resumable download.

Only the standard library: the demo pair must download on a machine where nothing but the Python
index is reachable, before any optional dependency is known to work.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_INDEX = "https://pypi.org/simple/"
PEP691_JSON = "application/vnd.pypi.simple.v1+json"
_CHUNK = 1 << 20
_RETRIES = 3
_BACKOFF_S = 1.5  # times the attempt number
_TIMEOUT = 60.0

Progress = Callable[[int, int], None]  # bytes done, bytes total


class FetchError(Exception):
    """A download failed; the message names the file and what to do."""


class FetchCancelled(FetchError):
    pass


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    size: int | None
    sha256: str | None


def index_url() -> str:
    return os.environ.get("SPECCHAT_PYPI_INDEX") or DEFAULT_INDEX


def normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()  # PEP 503


def find_file(project: str, filename: str, index: str | None = None) -> IndexFile:
    """Look `filename` up in the index page of `project`."""
    base = index or index_url()
    page = urllib.parse.urljoin(base if base.endswith("/") else base + "/", normalize(project) + "/")
    request = urllib.request.Request(page, headers={"Accept": PEP691_JSON, "User-Agent": "specchat"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
            data = json.load(response)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{filename}: the index answered HTTP {e.code} for {page}") from None
    except (urllib.error.URLError, OSError) as e:
        raise FetchError(
            f"{filename}: cannot reach the package index at {page} ({_why(e)}); "
            "check the network connection and try again"
        ) from None
    except ValueError:
        raise FetchError(f"{filename}: the index at {page} did not answer in PEP 691 JSON") from None
    for entry in data.get("files", []):
        if entry.get("filename") == filename:
            size = entry.get("size")
            return IndexFile(
                filename,
                urllib.parse.urljoin(page, entry["url"]),
                int(size) if size is not None else None,
                entry.get("hashes", {}).get("sha256"),
            )
    raise FetchError(f"{filename}: not found on the index page {page}; the release may have been removed")


def download(
    file: IndexFile, dest: Path, progress: Progress | None = None, cancel: threading.Event | None = None
) -> Path:
    """Download to `dest`, resuming `dest.part` with an HTTP Range request; verify the index's SHA-256.

    The final name appears only after the hash matched, so an interrupted run leaves only `.part`.
    """
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(_RETRIES):
        try:
            _get(file, part, progress, cancel)
            break
        except FetchCancelled:
            raise
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            local = _local_problem(file.filename, dest.parent, e)
            if local:
                raise FetchError(local) from None
            if isinstance(e, urllib.error.HTTPError) and e.code < 500 and e.code != 429:
                raise FetchError(
                    f"{file.filename}: the server answered HTTP {e.code} for {file.url}"
                ) from None
            if attempt == _RETRIES - 1:
                raise FetchError(
                    f"{file.filename}: download failed ({_why(e)}); what was downloaded is kept, "
                    "run the command again to resume"
                ) from None
            time.sleep(_BACKOFF_S * (attempt + 1))
    if file.sha256:
        actual = sha256_file(part)
        if actual != file.sha256.lower():
            part.unlink(missing_ok=True)
            raise FetchError(
                f"{file.filename}: SHA-256 mismatch (expected {file.sha256}, got {actual}); the "
                "corrupt download was deleted, run the command again"
            )
    os.replace(part, dest)
    return dest


def _get(file: IndexFile, part: Path, progress: Progress | None, cancel: threading.Event | None) -> None:
    have = part.stat().st_size if part.exists() else 0
    if file.size is not None and have > file.size:  # not ours, or the file changed: start over
        part.unlink()
        have = 0
    if file.size is not None and have == file.size:
        return
    headers = {"User-Agent": "specchat"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(file.url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing past what we have: restart cleanly
            part.unlink()
            raise urllib.error.URLError("range not satisfiable, restarting") from None
        raise
    with response:
        if have and response.status != 206:  # server ignored the Range header
            have = 0
        length = response.headers.get("Content-Length")
        total = file.size or (have + int(length) if length else 0)
        with open(part, "ab" if have else "wb") as out:
            done = have
            if progress:
                progress(done, total)
            while chunk := response.read(_CHUNK):
                if cancel is not None and cancel.is_set():
                    raise FetchCancelled(f"{file.filename}: download cancelled; run again to resume")
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    if total and done != total:
        raise urllib.error.URLError(f"connection closed after {done:,} of {total:,} bytes")


def sha256_file(path: Path, progress: Progress | None = None, cancel: threading.Event | None = None) -> str:
    digest, done = hashlib.sha256(), 0
    total = path.stat().st_size
    with open(path, "rb") as f:
        while chunk := f.read(4 * _CHUNK):
            if cancel is not None and cancel.is_set():
                raise FetchCancelled(f"{path.name}: verification cancelled")
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return digest.hexdigest()


def _local_problem(name: str, folder: Path, e: BaseException) -> str | None:
    """A message for errors of the local disk, which retrying cannot fix; None for network errors."""
    return local_problem(name, folder, e) if not isinstance(e, urllib.error.URLError) else None


def local_problem(name: str, folder: Path, e: BaseException) -> str | None:
    if not isinstance(e, OSError):
        return None
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{name}: the disk is full while writing to {folder}; free some space and run again"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{name}: cannot write to {folder} ({e.strerror}); choose a writable models folder"
    return None


def _why(e: BaseException) -> str:
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        reason = e.reason
        return "timed out" if isinstance(reason, socket.timeout | TimeoutError) else str(reason)
    return str(e) or type(e).__name__

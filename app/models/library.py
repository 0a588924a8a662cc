"""The local model library: every GGUF in the models folder, any folder the user adds, and the
Hugging Face cache's GGUF files (found by huggingface_hub's own scan, `app.models.hub.cached_gguf`).

Listing never raises: a file that cannot be read becomes an entry carrying the reason, so the picker
can show it greyed with its message instead of an empty list.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app import paths
from app.models.gguf_meta import GGUFError, GGUFInfo, read_gguf
from app.models.hub_support import CachedGGUF

# Later shards of a split model ("-00002-of-00003.gguf"): llama.cpp opens the first one only.
_LATER_SHARD = re.compile(r"-0*([2-9]|\d{2,})-of-\d+\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class LibraryEntry:
    path: Path
    file_size: int
    info: GGUFInfo | None = None
    error: str | None = None  # set when the file (or folder) cannot be used
    hub: CachedGGUF | None = None  # set when the file is in the Hugging Face cache

    @property
    def ok(self) -> bool:
        return self.info is not None

    @property
    def display_name(self) -> str:
        return self.info.name if self.info else self.path.name

    def to_json(self) -> dict[str, Any]:
        i = self.info
        return {
            "path": str(self.path),
            "file": self.path.name,
            "source": "hf-cache" if self.hub else "local",
            "hub": self.hub.to_json() if self.hub else None,
            "size": self.file_size,
            "error": self.error,
            "name": i.name if i else None,
            "architecture": i.architecture if i else None,
            "n_params": i.n_params if i else None,
            "quantisation": i.file_type if i else None,
            "context_length": i.context_length if i else None,
            "n_layer": i.n_layer if i else None,
            "vocab_size": i.vocab_size if i else None,
            "tokenizer_fingerprint": i.tokenizer_fingerprint if i else None,
            "has_chat_template": bool(i.chat_template) if i else None,
        }


def default_folders() -> list[Path]:
    return [paths.models_dir()]


def list_models(
    folders: Iterable[str | os.PathLike[str]] | None = None,
    *,
    extra_folders: Iterable[str | os.PathLike[str]] = (),
    files: Iterable[str | os.PathLike[str]] = (),
    recursive: bool = True,
    hub_files: Iterable[CachedGGUF] = (),
) -> list[LibraryEntry]:
    """GGUF files under `folders` (default: the models folder), `extra_folders` (added by the user),
    explicit `files` (drag and drop) and `hub_files` (the Hugging Face cache), each real file once,
    readable ones first. A file that is in the cache carries its repository, however it was found.

    A missing base folder is simply empty (the models folder appears with the first download); a
    missing or unreadable folder the user added becomes an entry with an error.
    """
    base = [(Path(f).expanduser(), False) for f in (default_folders() if folders is None else folders)]
    entries: list[LibraryEntry] = []
    seen: set[str] = set()
    candidates: list[Path] = [Path(f).expanduser() for f in files]
    for folder, added in base + [(Path(f).expanduser(), True) for f in extra_folders]:
        if not folder.is_dir():
            if added:
                what = "is not a folder" if folder.exists() else "folder does not exist"
                entries.append(LibraryEntry(folder, 0, error=f"{folder}: {what}"))
            continue
        found, problem = _scan(folder, recursive)
        candidates.extend(found)
        if problem:
            entries.append(LibraryEntry(folder, 0, error=problem))
    cached = [f for f in hub_files if not _LATER_SHARD.search(f.path.name)]
    origins = {_identity(f.path): f for f in reversed(cached)}  # the first revision listed wins
    candidates.extend(f.path for f in cached)
    for path in candidates:
        key = _identity(path)
        if key in seen:
            continue
        seen.add(key)
        entry = describe(path)
        entries.append(replace(entry, hub=origins[key]) if key in origins else entry)
    entries.sort(key=lambda e: (e.error is not None, e.display_name.lower(), str(e.path)))
    return entries


def describe(path: str | os.PathLike[str]) -> LibraryEntry:
    """One entry for one file; errors are captured in the entry."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    try:
        return LibraryEntry(p, size, info=read_gguf(p))
    except GGUFError as e:
        return LibraryEntry(p, size, error=str(e))
    except Exception as e:  # a listing must survive anything a strange file throws at it
        return LibraryEntry(p, size, error=f"{p}: cannot read ({type(e).__name__}: {e})")


def _scan(folder: Path, recursive: bool) -> tuple[list[Path], str | None]:
    found: list[Path] = []
    problems: list[str] = []

    def onerror(e: OSError) -> None:
        problems.append(f"{e.filename}: cannot read folder ({e.strerror}); check its permissions")

    walker = os.walk(folder, onerror=onerror, followlinks=False)
    for root, dirs, names in walker:
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for name in sorted(names):
            if name.lower().endswith(".gguf") and not name.startswith(".") and not _LATER_SHARD.search(name):
                found.append(Path(root) / name)
    return found, "; ".join(problems) or None


def _identity(path: Path) -> str:
    # The hub cache links snapshot files to blobs: list each real file once.
    try:
        return str(path.resolve())
    except OSError:
        return str(path)

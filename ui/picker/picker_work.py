"""The picker's disk work, in a child process: listing folders (every GGUF header is parsed) and checking
drafts against a target (the pair doctor reads both vocabularies).

This is pure Python that runs for seconds on a big folder. On a thread of the GUI's own process it still
held the GUI thread up, by 60 to 150 ms at a time (tests/test_picker_stall.py, two busy cores): the GUI
thread waits for the GIL each time it needs it. So it runs in one child (`python -m ui.picker.picker_work`),
started at the first call and kept: its GGUF header cache stays warm between a listing and the pair checks
after it.
Calls are pickled over the child's stdin and stdout, one at a time; the caller's thread waits with the
GIL released. Where no child can run (a frozen bundle has no interpreter to start, as in
`app.llama_backend.rpc.probe`) or it died, the call runs on the caller's thread instead. Qt-free: the
child imports this module and `app.models` only.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.models.library import LibraryEntry, list_models
from app.models.pair_doctor import PairReport, check_pair

log = logging.getLogger(__name__)

PAIRS_PER_CALL = 8  # a stale pair check stops after at most this many more


@dataclass(frozen=True)
class Scan:
    entries: list[LibraryEntry]
    files: list[str]  # the explicit files, with the wanted ones the folders did not hold


def scan(folders: list[Path], extra_folders: list[str], files: list[str], wanted: Iterable[Path] = ()) -> Scan:
    """The folders' and files' GGUF entries; a wanted file (the pair in use) the folders do not hold is
    listed as an explicit file, or named in an error entry when it is gone."""
    return _call("scan", folders, extra_folders, files, list(wanted))


def check_pairs(target: str, drafts: Iterable[str], alive: Callable[[], bool]) -> dict[str, PairReport]:
    """The pair doctor's report of `target` with each draft, keyed by draft; stops early once not `alive()`."""
    todo, out = list(drafts), {}
    for start in range(0, len(todo), PAIRS_PER_CALL):
        if not alive():
            break
        out.update(_call("pairs", target, todo[start : start + PAIRS_PER_CALL]))
    return out


# --- the work itself (in the child, or on the caller's thread) -----------------------------------------


def _scan(folders: list[Path], extra_folders: list[str], files: list[str], wanted: list[Path]) -> Scan:
    entries = list_models(folders, extra_folders=extra_folders, files=files)
    listed = {str(e.path) for e in entries if e.ok}
    missing = [str(p) for p in wanted if str(p) not in listed and str(p) not in files]
    if missing:
        files = files + missing
        entries = list_models(folders, extra_folders=extra_folders, files=files)
    return Scan(entries, files)


def _pairs(target: str, drafts: list[str]) -> dict[str, PairReport]:
    return {draft: check_pair(target, draft) for draft in drafts}  # metadata only, never raises


_WORK: dict[str, Callable[..., Any]] = {"scan": _scan, "pairs": _pairs}


# --- the child ------------------------------------------------------------------------------------------

_lock = threading.Lock()  # one call at a time: the child answers in order
_child: subprocess.Popen[bytes] | None = None


def _call(name: str, *args: Any) -> Any:
    with _lock:
        child = _the_child()
        if child is not None and child.stdin is not None and child.stdout is not None:
            try:
                pickle.dump((name, args), child.stdin)
                child.stdin.flush()
                ok, value = pickle.load(child.stdout)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # ValueError: closed at exit
                log.warning("the picker's worker process ended; working on this thread", exc_info=True)
                _stop()
            else:
                if ok:
                    return value
                raise RuntimeError(value)
    return _WORK[name](*args)


def _the_child() -> subprocess.Popen[bytes] | None:
    global _child
    if _child is not None and _child.poll() is None:
        return _child
    if getattr(sys, "frozen", False):
        return None
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        _child = subprocess.Popen([sys.executable, "-m", "ui.picker.picker_work"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env)  # fmt: skip
    except OSError:
        log.warning("cannot start the picker's worker process; working on this thread", exc_info=True)
        _child = None
    return _child


def _stop() -> None:
    global _child
    if _child is not None:
        _child.kill()
        _child.wait()
    _child = None


@atexit.register
def _close() -> None:
    """At exit: end the child (its stdin closes; a listing it is still busy with is cut short)."""
    global _child
    if _child is not None and _child.stdin is not None:
        _child.stdin.close()
        try:
            _child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            _child.kill()
            _child.wait()
    _child = None


def _serve() -> None:
    """The child: answer pickled (name, args) from stdin with pickled (ok, result or error text) on stdout,
    until stdin closes (the GUI's process ended)."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    while True:
        try:
            name, args = pickle.load(requests)
        except EOFError:
            return
        try:
            reply = (True, _WORK[name](*args))
        except Exception as e:
            reply = (False, f"{type(e).__name__}: {e}")
        pickle.dump(reply, replies)
        replies.flush()


if __name__ == "__main__":
    from ui.picker import picker_work  # this module by its own name: what it returns unpickles in the GUI's process

    picker_work._serve()

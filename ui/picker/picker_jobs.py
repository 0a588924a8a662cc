"""The picker's slow work, off the GUI thread: device discovery (RPC servers answer over the network),
folder scans and pair checks (`picker_work`: in a child process, waited for here).

`PickerJobs.start(kind, work)` runs `work(alive)` on a daemon thread of its own (a server that never
answers holds that thread, nothing else, and not the process's exit). Its result comes back on the GUI
thread as `finished(kind, result, error)`, only while it is the newest job of its kind: starting another
job of a kind (or `cancel(kind)`) makes the older one stale (`alive()` turns False, so it can stop early)
and a stale result is dropped. An exception in `work` becomes `error` (its text), never an exception on
the GUI thread. On Linux the jobs' threads, and so the processes they start, run at a lower CPU priority
than the GUI thread. `defer(kind, work)` runs GUI-thread work a turn of the event loop later, after the
paint of what changed. `settled` says that nothing is pending any more. Results travel through one relay
object that lives as long as the process, so a job that ends after its dialog was deleted emits into
nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path

import shiboken6
from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.engine import memory_plan
from app.engine.pair_config import PairConfig
from app.llama_backend import rpc
from app.memory import BuildSpec, DeviceBudget, budgets

log = logging.getLogger(__name__)

NICE = 10  # the jobs' threads and the processes they start yield the CPU to the GUI thread
WAITING = {"devices": "Finding devices…", "scan": "Scanning models…", "pairs": "Checking the drafts…"}


# --- the work -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Devices:
    build: BuildSpec
    budgets: list[DeviceBudget]
    draft_build: BuildSpec | None = None
    problem: str | None = None  # why the settings' RPC servers could not be used, for the dialog to say


def find_devices(rpc_setting: str = "", strict: bool = False) -> Devices:
    """llama.cpp's devices and build (the target's, with the settings' RPC servers' devices first, and
    the draft's where it differs), or a CPU-only build budgeting system RAM if they cannot be read.
    Blocks on the network while an RPC server is asked: run it off the GUI thread."""
    try:
        servers = tuple(e.strip() for e in rpc_setting.split(",") if e.strip())
        placing = memory_plan.placing_for(PairConfig(Path("unused.gguf"), rpc=servers))
        found = Devices(placing.build, budgets(placing.devices), placing.draft_build)
    except rpc.RpcError as e:  # a server down: the meter still works against this machine
        found = Devices(BuildSpec(), budgets(), None, str(e))
    except Exception:  # no backend: the meter still works against RAM
        log.info("devices could not be read", exc_info=True)
        found = Devices(BuildSpec(), budgets(), None)
    if strict:  # strict loads without CPU repacking (as the worker does)
        draft = found.draft_build and replace(found.draft_build, repack_types=frozenset())
        found = replace(found, build=replace(found.build, repack_types=frozenset()), draft_build=draft)
    return found


# --- running it -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Done:
    owner: int
    kind: str
    generation: int
    result: object
    error: str | None


class _Relay(QObject):
    """Carries results from the job threads to the GUI thread and hands each to its PickerJobs while that lives.

    Not a connection from this signal to each PickerJobs' slot: a result that arrived after its dialog was deleted
    crashed the process in Qt's delivery (a segfault in the event loop, no Python frame), when a device query held
    by a silent RPC server ended seconds after its test. The relay looks its owner up itself and skips one whose
    C++ object is gone."""

    done = Signal(object)  # _Done

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[int, weakref.ref[PickerJobs]] = {}
        self.done.connect(self._on_self_done)

    @Slot(object)
    def _on_self_done(self, done: _Done) -> None:
        ref = self.owners.get(done.owner)
        jobs = ref() if ref is not None else None
        if jobs is None or not shiboken6.isValid(jobs):
            self.owners.pop(done.owner, None)
            return
        jobs._on_relay_done(done)


_relay: _Relay | None = None
_owners = count(1)


def _the_relay() -> _Relay:
    """The one relay, made on the GUI thread and never deleted: a job may outlive its dialog."""
    global _relay
    if _relay is None:
        _relay = _Relay()
    return _relay


class PickerJobs(QObject):
    finished = Signal(str, object, object)  # kind, result, error text or None
    pendingChanged = Signal()  # a job started, ended or was cancelled: `pending()` says which wait
    settled = Signal()  # no job pending any more

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._id = next(_owners)
        # kind -> the newest job's generation; a plain dict (read by the job threads), not Qt state
        self._newest: dict[str, int] = {}
        self._pending: set[str] = set()
        self._deferred: dict[str, Callable[[], None]] = {}  # kind -> GUI-thread work for the next turn
        self._dispatching = False  # inside a handler, which may start the next job: not settled yet
        owners = _the_relay().owners
        # The entry goes with its PickerJobs' wrapper, so dialogs opened and closed all day leave nothing behind.
        owners[self._id] = weakref.ref(self, lambda _dead, key=self._id: owners.pop(key, None))

    # --- public API -------------------------------------------------------------------------------

    def start(self, kind: str, work: Callable[[Callable[[], bool]], object]) -> None:
        """Run `work(alive)` on a thread; `alive()` turns False once a newer job of `kind` starts."""
        generation = self._newest.get(kind, 0) + 1
        self._newest[kind] = generation
        self._pending.add(kind)
        newest = self._newest
        thread = threading.Thread(target=_run, name=f"picker-{kind}", daemon=True,
                                  args=(_the_relay(), self._id, kind, generation, work,
                                        lambda: newest.get(kind) == generation))  # fmt: skip
        thread.start()
        self.pendingChanged.emit()

    def defer(self, kind: str, work: Callable[[], None]) -> None:
        """Run `work()` on this (the GUI) thread at the event loop's next turn, once however often it is
        asked for before then (the newest `work` of `kind` runs); pending until it has run."""
        if kind not in self._deferred:  # 1 ms, not 0 (a posted event): after the paint and the timers due
            QTimer.singleShot(1, self, lambda: self.flush(kind))
        self._deferred[kind] = work
        if kind not in self._pending:
            self._pending.add(kind)
            self.pendingChanged.emit()

    def flush(self, kind: str) -> None:
        """Run the deferred work of `kind` now, if any is waiting."""
        work = self._deferred.pop(kind, None)
        if work is None:
            return
        self._pending.discard(kind)
        self._dispatch(work)

    def cancel(self, kind: str) -> None:
        """Drop the pending job of `kind` (its result is ignored when it comes) or its deferred work."""
        if kind not in self._pending:
            return
        self._newest[kind] = self._newest.get(kind, 0) + 1
        self._deferred.pop(kind, None)
        self._pending.discard(kind)
        self.pendingChanged.emit()
        self._maybe_settled()

    def pending(self) -> list[str]:
        """The kinds whose newest job has not answered yet, in WAITING's order."""
        return [k for k in WAITING if k in self._pending] + sorted(self._pending - WAITING.keys())

    def busy(self) -> bool:
        return bool(self._pending)

    # --- slots ------------------------------------------------------------------------------------

    def _on_relay_done(self, done: _Done) -> None:
        if self._newest.get(done.kind) != done.generation or done.kind not in self._pending:
            return  # stale (the relay hands each result to its own PickerJobs only)
        self._pending.discard(done.kind)
        self._dispatch(lambda: self.finished.emit(done.kind, done.result, done.error))

    # --- internals --------------------------------------------------------------------------------

    def _dispatch(self, work: Callable[[], object]) -> None:
        """Run a result's or a deferral's handler, which may start, defer or cancel jobs; `settled` after."""
        outer, self._dispatching = self._dispatching, True
        try:
            work()
        finally:
            self._dispatching = outer
        self.pendingChanged.emit()
        self._maybe_settled()

    def _maybe_settled(self) -> None:
        if not self._pending and not self._dispatching:
            self.settled.emit()


def _run(
    relay: _Relay,
    owner: int,
    kind: str,
    generation: int,
    work: Callable[[Callable[[], bool]], object],
    alive: Callable[[], bool],
) -> None:
    if sys.platform == "linux":  # nice is per thread there, and the children it starts inherit it
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    try:
        result, error = work(alive), None
    except Exception as e:
        log.warning("picker job %s failed", kind, exc_info=True)
        result, error = None, f"{type(e).__name__}: {e}"
    try:
        relay.done.emit(_Done(owner, kind, generation, result, error))  # queued to the GUI thread
    except RuntimeError:  # the application is gone
        pass

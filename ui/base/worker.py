"""The generation worker: one QThread owns the SpecSession (both llama contexts) for its whole life.

llama contexts are not thread-safe, so the session is created, used and closed on that one thread.
The runner's slot loops over the engine's generator and so blocks its thread's event loop: Stop is
a `threading.Event` the engine checks between steps, never a queued call.

Events travel through an outbox (a locked deque). The runner wakes the GUI once per batch, and the
GUI drains at most every `FLUSH_MS`, so however fast tokens come, the GUI thread handles one batch
per frame instead of one signal per token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum, auto
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from app.engine.events import Divergence, FinishEvent, StepEvent
from app.engine.pair_config import PairConfig
from app.engine.parting import NotReplayed, PartingReplay, first_divergence, layout, replay_parting
from app.engine.session import GenParams

log = logging.getLogger(__name__)
FLUSH_MS = 30


@dataclass(frozen=True)
class Job:
    """Runs made one after the other on the same session (two for a side-by-side comparison)."""

    messages: tuple[dict[str, str], ...]
    runs: tuple[tuple[str, GenParams], ...]
    # A history longer than the context: by default the job ends with an OVERFLOW item (nothing runs, the user is
    # asked); `drop_oldest` leaves out the oldest turns (app.chat.context_fit) and says how many.
    drop_oldest: bool = False
    left_out: int = 0  # turns the chat's last reply left out: kept out while the rest fits (its cache serves)


@dataclass(frozen=True)
class PartingCheck:
    """A greedy comparison's parting, checked by replaying the speculative run's own verify batches."""

    divergence: Divergence
    replay: PartingReplay | NotReplayed


@dataclass(frozen=True)
class LoadInfo:
    config: PairConfig
    load_s: float
    modes: tuple[str, ...]
    measured: dict[str, list[Any]] = field(default_factory=dict)  # role -> llama.cpp buffer reports
    process_gpu: dict[str, int] = field(default_factory=dict)  # GPU device -> this process's bytes (NVML)
    gpu_note: str = ""  # a GPU of this machine the llama.cpp build cannot use, and the fix ("" otherwise)
    backends: str = ""  # llama.cpp's loaded modules: "CPU variant haswell; GPU backends: none" (the About box)


class Item(Enum):
    """What an outbox item carries (its run name and payload follow); each kind has one handler in `_deliver`."""

    PROGRESS = auto()  # run: "target" | "draft", payload: the fraction loaded
    MEMORY = auto()  # the pair's predicted memory (or None)
    LOADED = auto()  # LoadInfo
    LOAD_FAILED = auto()  # run: a LoadFailure, payload: the message
    ERROR = auto()  # a sentence for the user
    START = auto()  # run name, GenParams
    EVENT = auto()  # run name, one engine event (batched per run by `_drain`)
    FINISH = auto()  # run name, FinishEvent
    DONE = auto()  # the job's result (bool)
    CONTEXT = auto()  # (tokens needed, n_ctx)
    OVERFLOW = auto()  # (tokens needed, n_ctx): nothing ran
    TRIMMED = auto()  # (turns left out, tokens sent, n_ctx)
    PARTING = auto()  # None when the replay starts, then the PartingCheck
    SERVING = auto()  # run: the request's id, payload: the server's Job
    SERVED = auto()  # (Job, FinishEvent or None, kept events)
    RPC_LOST = auto()  # the message


class LoadFailure(StrEnum):
    """Why a load ended without models (loadFailed's first argument; a str, so it travels in a Signal(str))."""

    INCOMPATIBLE = "incompatible"
    WONTFIT = "wontfit"
    CANCELLED = "cancelled"
    ERROR = "error"


class _Outbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[tuple[Item, str, Any]] = deque()
        self._armed = False

    def put(self, kind: Item, run: str, payload: Any) -> bool:
        """Queue an item; True when the GUI must be woken (the first item since the last drain)."""
        with self._lock:
            self._items.append((kind, run, payload))
            wake = not self._armed
            self._armed = True
            return wake

    def take(self) -> list[tuple[Item, str, Any]]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self._armed = False
            return items


class _Runner(QObject):
    """Lives in the worker thread; everything here runs there."""

    wake = Signal()

    def __init__(self, outbox: _Outbox) -> None:
        super().__init__()
        self._out = outbox
        self._session: Any = None

    def _put(self, kind: Item, run: str = "", payload: Any = None) -> None:
        if self._out.put(kind, run, payload):
            self.wake.emit()

    @Slot(object, object)
    def load(self, config: PairConfig, cancel: threading.Event) -> None:
        self._close_session()
        if config.rpc:
            _watch_rpc(self._put)
        t0 = time.perf_counter()
        last = ["", -1.0]

        def progress(label: str, fraction: float) -> bool:
            if label != last[0] or fraction - last[1] >= 0.02 or fraction >= 1.0:
                if label == "draft" and last[0] != "draft":
                    split[0] = len(lines)
                last[0], last[1] = label, fraction
                self._put(Item.PROGRESS, label, fraction)
            return not cancel.is_set()  # False makes llama.cpp stop reading weights: cancelled, or closing

        lines: list[str] = []
        split = [None]
        try:
            from app.engine.session import SpecSession

            self._put(Item.MEMORY, "", _predict(config))
            with _capture_logs() as lines:
                self._session = SpecSession(config, progress=progress)
            measured = _measured(lines, split[0])
            modes = self._session.available_modes
            info = LoadInfo(config, time.perf_counter() - t0, modes, measured, _process_gpu(), *_build_notes())
            self._put(Item.LOADED, "", info)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the window
            self._session = None
            if cancel.is_set():  # llama.cpp stopped reading weights because we asked
                self._put(Item.LOAD_FAILED, LoadFailure.CANCELLED, f"Loading {Path(config.target).name} was cancelled.")
                return
            log.info("load failed", exc_info=True)
            from app.engine.session import IncompatiblePairError
            from app.memory import WontFitError

            kind = (LoadFailure.INCOMPATIBLE if isinstance(exc, IncompatiblePairError)
                    else LoadFailure.WONTFIT if isinstance(exc, WontFitError) else LoadFailure.ERROR)
            self._put(Item.LOAD_FAILED, kind, _describe(exc))

    @Slot(object, object)
    def run(self, job: Job, cancel: threading.Event) -> None:
        ok = True
        if self._session is None:
            self._put(Item.ERROR, "run", "No models are loaded yet.")
            self._put(Item.DONE, "", False)
            return
        try:
            prompt = self._fit(job)
        except Exception as exc:  # noqa: BLE001 - a template or tokenizer error
            log.info("fitting the context failed", exc_info=True)
            self._put(Item.ERROR, "run", _describe(exc))
            self._put(Item.DONE, "", False)
            return
        if prompt is None:
            self._put(Item.DONE, "", True)
            return
        finishes: dict[str, FinishEvent] = {}
        steps: list[StepEvent] = []  # the last run's, for replaying a comparison's parting
        for name, params in job.runs:
            if cancel.is_set():
                break
            self._put(Item.START, name, params)
            steps = []
            try:
                cancelled = False
                for event in self._session.generate(prompt, params, cancel):
                    if isinstance(event, FinishEvent):
                        self._put(Item.FINISH, name, event)
                        finishes[name] = event
                        cancelled = event.stats.finish_reason == "cancelled"
                    else:
                        if isinstance(event, StepEvent):
                            steps.append(event)
                        self._put(Item.EVENT, name, event)
                if cancelled:
                    break
            except Exception as exc:  # noqa: BLE001 - context full, out of memory, a llama.cpp error
                log.info("generation failed", exc_info=True)
                self._put(Item.ERROR, name, _describe(exc))
                ok = False
                break
        if ok and not cancel.is_set() and _greedy_comparison(job):
            self._check_parting(prompt, finishes, steps, cancel)
        self._put(Item.DONE, "", ok)

    @Slot(object)
    def serve(self, job: Any) -> None:
        """A request of the local server (app.server.jobs.Job), run between the window's own replies; the window
        gets a copy of its reply when it ends ("served"), to show it with the overlay."""
        from app.engine.events import TokenEvent
        from app.server.errors import not_ready
        from app.server.jobs import DONE, Failed, run_job

        self._put(Item.SERVING, job.id, job)
        if self._session is None:
            job.deliver(Failed(not_ready("no models are loaded in the window.")))
            job.deliver(DONE)
            self._put(Item.SERVED, job.id, (job, None, []))
            return
        kept: list[Any] = []
        deliver = job.deliver

        def tee(item: object) -> None:
            deliver(item)
            if isinstance(item, (TokenEvent, StepEvent)):
                kept.append(item)

        job.deliver = tee
        finish = run_job(self._session, job)
        self._put(Item.SERVED, job.id, (job, finish, kept))

    def _check_parting(self, prompt: list[int], finishes: dict[str, FinishEvent], steps: list[StepEvent],
                       cancel: threading.Event) -> None:
        """A greedy comparison that parted: is the speculative token the target's own choice in the batches that
        computed it? Replayed on the cache both runs shared (Stop skips it; the margin alone is then shown)."""
        plain, spec = finishes.get("plain"), finishes.get("spec")
        if plain is None or spec is None or "cancelled" in (plain.stats.finish_reason, spec.stats.finish_reason):
            return
        div = first_divergence(plain, spec)
        if div is None:
            return
        self._put(Item.PARTING, "", None)  # the check has started: it replays the run up to the parting
        assert self._session is not None
        try:
            replay = replay_parting(self._session.target_ctx, prompt, spec.tokens, layout(steps), div, cancel)
        except Exception as exc:  # noqa: BLE001 - the layout does not fit the reply: say so, keep the chat
            log.info("replaying the parting failed", exc_info=True)
            replay = NotReplayed(f"the replay failed: {exc}")
        self._put(Item.PARTING, "", PartingCheck(div, replay))

    def _fit(self, job: Job) -> list[int] | None:
        """The templated history's tokens, fitted to the context as the job says; None when it asked
        first. Tokenized once here and reused for the reply (a long chat takes a while to template)."""
        from app.chat.context_fit import fit_messages, reply_room

        messages = list(job.messages)
        n_ctx = self._session.config.n_ctx
        room = reply_room(n_ctx, max(params.n_predict for _name, params in job.runs))

        def count(msgs: list[dict[str, str]]) -> int:
            return len(self._session.chat_prompt(msgs))

        # A follow-up reuses the ids of the replies before it, so the cached prefix still matches (turn_memory).
        prompt = self._session.chat_prompt(messages, reuse_replies=True)
        needed = len(prompt)
        self._put(Item.CONTEXT, "", (needed, n_ctx))
        if needed + room <= n_ctx:
            return list(prompt)
        if not job.drop_oldest:
            self._put(Item.OVERFLOW, "", (needed, n_ctx))
            return None
        fit = fit_messages(messages, count, n_ctx, room, job.left_out)
        if not fit.fits:
            raise ValueError(f"The newest prompt alone needs {fit.prompt_tokens} tokens, which leaves no room for a "
                             f"reply in the {n_ctx}-token context: shorten it, or raise Context in Settings.")
        self._put(Item.TRIMMED, "", (fit.dropped_turns, fit.prompt_tokens, n_ctx))
        return list(self._session.chat_prompt(fit.messages, reuse_replies=True))

    @Slot()
    def close(self) -> None:
        self._close_session()
        thread = self.thread()
        if thread is not None:
            thread.quit()  # from inside: every request queued before this one has run

    def _close_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.close()


_KEPT_THREADS: list[QThread] = []  # engine threads that would not stop: never garbage-collected while running


class GenerationWorker(QObject):
    """GUI-thread facade: request loads and runs, receive batched results as signals."""

    loadProgress = Signal(str, float)  # "target" | "draft", 0..1
    loaded = Signal(object)  # LoadInfo
    loadFailed = Signal(str, str)  # a LoadFailure, the message (also sent through `error`)
    memoryPredicted = Signal(object)  # app.memory.PairPrediction or None
    runStarted = Signal(str, object)  # run name, GenParams
    events = Signal(str, object)  # run name, list of TokenEvent/StepEvent/GovernorEvent in order
    finished = Signal(str, object)  # run name, FinishEvent
    error = Signal(str)  # a sentence for the user (load and generation errors alike)
    jobDone = Signal(bool)  # every run of the job has ended; False after an error
    contextUsed = Signal(int, int)  # tokens of the templated history before the reply, n_ctx
    contextOverflow = Signal(int, int)  # the history needs this many tokens, more than n_ctx allows: nothing ran
    contextTrimmed = Signal(int, int, int)  # turns left out, tokens sent, n_ctx
    rpcLost = Signal(str)  # an RPC server stopped answering: the reply so far stays, the session is gone
    # A greedy comparison parted: None when its replay starts, then the PartingCheck (before jobDone).
    partingChecked = Signal(object)
    serving = Signal(object)  # a local server request (app.server.jobs.Job) has started on the engine thread
    served = Signal(object, object, object)  # that Job, its FinishEvent (None: refused or failed), its events

    _loadRequested = Signal(object, object)
    _runRequested = Signal(object, object)
    _closeRequested = Signal()
    _serveRequested = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._outbox = _Outbox()
        self._thread = QThread()
        self._thread.setObjectName("specchat-engine")
        self._runner = _Runner(self._outbox)
        self._runner.moveToThread(self._thread)
        self._runner.wake.connect(self._on_runner_wake)
        self._loadRequested.connect(self._runner.load)
        self._runRequested.connect(self._runner.run)
        self._closeRequested.connect(self._runner.close)
        # Emitted from the server's HTTP thread: queued to the engine thread, after what is already waiting there.
        self._serveRequested.connect(self._runner.serve, Qt.ConnectionType.QueuedConnection)
        self._thread.finished.connect(self._runner.deleteLater)
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.timeout.connect(self._on_flush_timer_timeout)
        self._last_drain = 0.0
        self._cancel = threading.Event()
        self._load_cancel = threading.Event()
        self._busy = False
        self._loading = False
        self._closed = False
        self.rpc_lost = False  # a server dropped: the session is gone until the app restarts
        self.stuck = False  # shutdown timed out: the engine thread still runs (never joined, never destroyed)
        self._handlers: dict[Item, Callable[[str, Any], None]] = {
            Item.PROGRESS: lambda run, fraction: self.loadProgress.emit(run, float(fraction)),
            Item.MEMORY: lambda _run, prediction: self.memoryPredicted.emit(prediction),
            Item.LOADED: self._deliver_loaded,
            Item.LOAD_FAILED: self._deliver_load_failed,
            Item.ERROR: lambda _run, message: self.error.emit(message),
            Item.START: self.runStarted.emit,
            Item.FINISH: self.finished.emit,
            Item.EVENT: lambda run, event: self.events.emit(run, [event]),
            Item.DONE: self._deliver_done,
            Item.CONTEXT: lambda _run, sizes: self.contextUsed.emit(*sizes),
            Item.OVERFLOW: lambda _run, sizes: self.contextOverflow.emit(*sizes),
            Item.TRIMMED: lambda _run, sizes: self.contextTrimmed.emit(*sizes),
            Item.PARTING: lambda _run, check: self.partingChecked.emit(check),
            Item.SERVING: lambda _run, job: self.serving.emit(job),
            Item.SERVED: lambda _run, served: self.served.emit(*served),
            Item.RPC_LOST: self._deliver_rpc_lost,
        }
        self._thread.start()

    # --- requests -------------------------------------------------------------------------------

    def load(self, config: PairConfig) -> None:
        if self._refuse_after_rpc_loss():
            return
        self._loading = True
        self._load_cancel = threading.Event()
        self._loadRequested.emit(config, self._load_cancel)

    def start(self, messages: Sequence[dict[str, str]], runs: Sequence[tuple[str, GenParams]],
              drop_oldest: bool = False, left_out: int = 0) -> None:
        if self._refuse_after_rpc_loss():
            self.jobDone.emit(False)
            return
        self._cancel = threading.Event()
        self._busy = True
        self._runRequested.emit(Job(tuple(messages), tuple(runs), drop_oldest, left_out), self._cancel)

    def stop(self) -> None:
        self._cancel.set()

    def serve(self, job: Any) -> None:
        """Queue a local server request (any thread: the HTTP thread calls this)."""
        self._serveRequested.emit(job)

    def cancel_load(self) -> bool:
        """Stop a load in progress at its next progress report (llama.cpp then stops reading weights); the
        load ends with loadFailed("cancelled", ...). False when nothing is loading."""
        if not self._loading:
            return False
        self._load_cancel.set()
        return True

    def _refuse_after_rpc_loss(self) -> bool:
        if self.rpc_lost:
            self.error.emit("An RPC server stopped answering, and llama.cpp cannot recover that connection: "
                            "restart SpecChat (your chats are saved) to load models again.")
        return self.rpc_lost

    def is_generating(self) -> bool:
        return self._busy

    def is_loading(self) -> bool:
        return self._loading

    def shutdown(self, timeout_ms: int = 120_000) -> bool:
        """Cancel, let the engine end its step, close the session on its thread, join the thread."""
        if self._closed:
            return True
        self._closed = True
        if self.rpc_lost:
            # The engine thread waits forever on a lost RPC server (ggml cannot unblock it): deliver
            # what came, and let the process end without joining it (ui.shell.app exits hard).
            self._drain()
            return False
        self._cancel.set()  # a reply ends within one step, prompt processing within one batch
        self._load_cancel.set()  # a load stops at its next progress report
        self._closeRequested.emit()
        done = self._thread.wait(timeout_ms)
        if not done:
            # Destroying a running QThread aborts the process: the thread is kept, and the app exits without
            # joining it once the store is flushed (ui.shell.app), as after a lost RPC server.
            log.error("the engine thread did not stop within %d ms; exiting without it", timeout_ms)
            self.stuck = True
            _KEPT_THREADS.append(self._thread)
        self._flush_timer.stop()
        self._drain()  # deliver the cancelled reply's last tokens and its FinishEvent, so they get saved
        return bool(done)

    # --- delivery -------------------------------------------------------------------------------

    @Slot()
    def _on_runner_wake(self) -> None:
        wait_ms = FLUSH_MS - (time.monotonic() - self._last_drain) * 1000.0
        if wait_ms > 0:
            if not self._flush_timer.isActive():
                self._flush_timer.start(int(wait_ms) + 1)
            return
        self._drain()

    @Slot()
    def _on_flush_timer_timeout(self) -> None:
        self._drain()

    def _drain(self) -> None:
        self._last_drain = time.monotonic()
        batch: list[Any] = []
        batch_run = ""
        for kind, run, payload in self._outbox.take():
            if kind is Item.EVENT and (run == batch_run or not batch):
                batch.append(payload)
                batch_run = run
                continue
            if batch:
                self.events.emit(batch_run, batch)
                batch = []
            if kind is Item.EVENT:
                batch, batch_run = [payload], run
            else:
                self._deliver(kind, run, payload)
        if batch:
            self.events.emit(batch_run, batch)

    def _deliver(self, kind: Item, run: str, payload: Any) -> None:
        self._handlers[kind](run, payload)

    def _deliver_loaded(self, _run: str, info: LoadInfo) -> None:
        self._loading = False
        self.loaded.emit(info)

    def _deliver_load_failed(self, kind: str, message: str) -> None:
        self._loading = False
        self.error.emit(message)
        self.loadFailed.emit(kind, message)  # after: listeners may refine the message (an action)

    def _deliver_done(self, _run: str, ok: bool) -> None:
        self._busy = False
        self.jobDone.emit(bool(ok))

    def _deliver_rpc_lost(self, _run: str, message: str) -> None:
        self.rpc_lost = True
        busy, self._busy, self._loading = self._busy, False, False
        self.error.emit(message)
        if busy:
            self.jobDone.emit(False)  # the reply so far is kept and saved as ended by this error
        self.rpcLost.emit(message)


def _greedy_comparison(job: Job) -> bool:
    names = [name for name, _params in job.runs]
    return names == ["plain", "spec"] and job.runs[-1][1].sampling.greedy


_rpc_watched = False


def _watch_rpc(put: Any) -> None:
    """Turn a lost RPC server into a message instead of ggml's process abort (once per process).

    ggml's handler runs on its connection thread; the engine thread is blocked in llama_decode on a
    reply that will never come. The handler reports, then parks its own thread so that ggml never
    reaches abort(): the window stays, the reply so far is saved, and the user can restart.
    """
    global _rpc_watched
    if _rpc_watched:
        return
    from app.llama_backend import rpc

    def _lost(error: Exception) -> None:
        put(Item.RPC_LOST, "", str(error))
        threading.Event().wait()  # never returns: see above

    rpc.on_drop(_lost)
    _rpc_watched = True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "Out of memory: the models or the context do not fit. Try a smaller context or fewer GPU layers."
    from app.llama_backend import LlamaError
    from app.memory import PredictionError, WontFitError

    if isinstance(exc, (LlamaError, OSError, ValueError, WontFitError, PredictionError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class _NoCapture:
    def __enter__(self) -> list[str]:
        return []

    def __exit__(self, *_exc: object) -> None:
        return None


def _capture_logs() -> Any:
    """llama.cpp's buffer report, for the memory meter's measured figures (best effort)."""
    try:
        from app.llama_backend.devices import capture_llama_logs

        return capture_llama_logs()
    except Exception:  # noqa: BLE001 - measurement is optional
        return _NoCapture()


def _measured(lines: list[str], split: int | None) -> dict[str, list[Any]]:
    try:
        from app.llama_backend.devices import parse_buffer_report
    except Exception:  # noqa: BLE001
        return {}
    cut = len(lines) if split is None else split
    out = {"target": parse_buffer_report(lines[:cut], "target")}
    if split is not None:
        out["draft"] = parse_buffer_report(lines[cut:], "draft")
    return out


def _process_gpu() -> dict[str, int]:
    """This process's use of each NVIDIA GPU by NVML, with both models loaded ({} elsewhere)."""
    try:
        from app.llama_backend.devices import list_devices
        from app.memory.nvml_usage import process_use_by_device

        return process_use_by_device(list_devices())
    except Exception:  # noqa: BLE001 - measurement is optional
        log.info("NVML reading failed", exc_info=True)
        return {}


def _build_notes() -> tuple[str, str]:
    """(the machine's GPU this build leaves idle, or ""; the loaded backend modules), read on this thread."""
    try:
        from app.llama_backend.devices import capabilities

        caps = capabilities()
    except Exception:  # noqa: BLE001 - the notes are advice; loading has succeeded
        log.info("GPU check failed", exc_info=True)
        return "", ""
    note = caps.unused_gpu.message() if caps.unused_gpu is not None and not caps.gpu_offload else ""
    return note, caps.loaded.describe() if caps.loaded is not None else ""


def _predict(config: PairConfig) -> Any:
    """The pair's predicted memory before loading (None when the metadata cannot be read)."""
    try:
        from app.engine.memory_plan import predict_for_config

        return predict_for_config(config)
    except Exception:  # noqa: BLE001 - the meter is informative; loading reports real errors
        log.info("memory prediction failed", exc_info=True)
        return None

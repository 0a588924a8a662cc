"""`specchat serve`'s engine: one thread that loads the pair, owns its llama contexts for its whole life, and runs
the requests one at a time in arrival order. A bounded number may run or wait; one more is refused (429)."""

from __future__ import annotations

import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.engine.session import SpecSession
from app.server.errors import ApiError, not_ready, queue_full
from app.server.jobs import DONE, Failed, Job, run_job

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Served:
    """What the server has loaded, for /v1/models and each response's `model`."""

    target: Path
    draft: Path | None
    mode: str  # the mode requests run in ("auto" resolved)
    n_ctx: int
    loaded_at: int  # Unix time

    @property
    def model_id(self) -> str:
        return self.target.stem

    def accepts(self, name: str) -> bool:
        """The target's id, its file name, and "specchat" (whatever pair is loaded) all name it."""
        return name in (self.model_id, self.target.name, "specchat")


class EngineThread:
    def __init__(self, open_session: Callable[[], SpecSession], mode: str, max_queue: int = 16) -> None:
        self.max_queue = max_queue
        self._mode = mode
        self._open = open_session
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._pending = 0  # running or waiting
        self._lock = threading.Lock()
        self._durations: collections.deque[float] = collections.deque(maxlen=16)
        # The latest requests' (id, engine finish reason or "failed", tokens): the log's summary, and what tests read.
        self.recent: collections.deque[tuple[str, str, int]] = collections.deque(maxlen=64)
        self.served: Served | None = None
        self.load_error: str | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specchat-engine", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Until the pair is loaded (True) or failed to load (False: see load_error)."""
        self._ready.wait(timeout)
        return self.served is not None

    def submit(self, job: Job) -> None:
        if self.served is None:
            raise not_ready(self.load_error or "the models are still loading.")
        with self._lock:
            if self._pending >= self.max_queue:
                raise queue_full(self._pending, self._retry_after())
            self._pending += 1
        self._jobs.put(job)

    @property
    def pending(self) -> int:
        return self._pending

    def close(self, timeout: float = 30.0) -> None:
        """Cancel what runs and waits, then free the models on their own thread."""
        drained: list[Job] = []
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                drained.append(item)
        for job in drained:
            job.deliver(Failed(ApiError(503, "The server is shutting down.", None, "shutting_down", "server_error")))
            job.deliver(DONE)
        self._jobs.put(None)
        self._thread.join(timeout)

    def _retry_after(self) -> int:
        mean = sum(self._durations) / len(self._durations) if self._durations else 5.0
        return max(1, min(120, math.ceil(mean * max(1, self._pending) / 2)))

    def _run(self) -> None:
        try:
            session = self._open()
        except Exception as error:  # a bad file, a pair that does not fit: named, and every request says it
            self.load_error = str(error)
            log.error("the server could not load its models: %s", error)
            self._ready.set()
            return
        with session:
            self.served = Served(session.config.target, session.config.draft, self._mode,
                                 session.target_ctx.n_ctx, int(time.time()))
            self._ready.set()
            while (job := self._jobs.get()) is not None:
                start = time.monotonic()
                finish = None
                try:
                    finish = run_job(session, job)
                finally:
                    reason = finish.stats.finish_reason if finish else "failed"
                    n_tokens = len(finish.tokens) if finish else 0
                    self.recent.append((job.id, reason, n_tokens))
                    log.info("request %s: %d tokens in %.1f s, %s", job.id, n_tokens, time.monotonic() - start, reason)
                    self._durations.append(time.monotonic() - start)
                    with self._lock:
                        self._pending -= 1

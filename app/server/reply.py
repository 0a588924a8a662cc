"""One request's reply as the HTTP side reads it: the engine's events in, text deltas and OpenAI's usage out."""

from __future__ import annotations

import threading
from typing import Any

from app.engine.events import FinishEvent, PrefillEvent, TokenEvent
from app.server.jobs import Started
from app.server.stop_scan import StopScan

FINISH_REASONS = {"stop": "stop", "length": "length", "context": "length", "cancelled": "stop"}


class ReplyState:
    """Folds one job's delivered items: `feed` returns the text that may be sent now."""

    def __init__(self, stops: tuple[str, ...], cancel: threading.Event) -> None:
        self.stops = stops
        self.cancel = cancel
        self.scan = StopScan(self.stops)
        self.started: Started | None = None
        self.prefilled: int | None = None  # prompt tokens the target had to process (the rest came from cache)
        self.tokens = 0  # completion tokens up to the stop sequence
        self.finish: FinishEvent | None = None

    def feed(self, item: object) -> str:
        if isinstance(item, Started):
            self.started = item
        elif isinstance(item, PrefillEvent) and item.model == "target":
            self.prefilled = item.total
        elif isinstance(item, TokenEvent):
            if self.scan.stopped_at is not None:
                return ""
            self.tokens += 1
            out = self.scan.feed(item.text)
            if self.scan.stopped_at is not None:
                self.cancel.set()  # the engine ends at its next step; what it writes until then is dropped
            return out
        elif isinstance(item, FinishEvent):
            self.finish = item
            return self.scan.flush()
        return ""

    @property
    def text(self) -> str:
        end = self.scan.stopped_at
        return self.scan.text if end is None else self.scan.text[:end]

    @property
    def finish_reason(self) -> str:
        if self.scan.stopped_at is not None:
            return "stop"
        return FINISH_REASONS.get(self.finish.stats.finish_reason, "stop") if self.finish else "stop"

    def usage(self) -> dict[str, Any]:
        prompt = self.started.prompt_tokens if self.started else 0
        stats = self.finish.stats if self.finish else None
        cached = prompt - self.prefilled if self.prefilled is not None else prompt
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.tokens,
            "total_tokens": prompt + self.tokens,
            "prompt_tokens_details": {"cached_tokens": max(0, cached)},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "accepted_prediction_tokens": stats.accepted_prediction_tokens if stats else 0,
                "rejected_prediction_tokens": stats.rejected_prediction_tokens if stats else 0,
            },
        }

    def figures(self) -> dict[str, Any]:
        """SpecChat's own figures (the `specchat` field): how the reply was drafted and verified."""
        s = self.finish.stats if self.finish else None
        if s is None:
            return {}
        return {
            "mode": s.mode, "steps": s.steps, "drafted": s.drafted, "accepted": s.accepted,
            "acceptance_rate": s.acceptance_rate, "tokens_per_step": s.tokens_per_step,
            "tokens_per_second": s.tokens_per_second, "prompt_tokens_per_second": s.prompt_tokens_per_second,
            "prefill_ms": s.prefill_ms, "decode_ms": s.decode_ms, "draft_ms": s.draft_ms, "verify_ms": s.verify_ms,
            "queued_ms": self.started.queued_ms if self.started else 0.0,
            "speculation_active": s.speculation_active,
            "prediction_tokens": s.prediction_tokens,
            "accepted_prediction_tokens": s.accepted_prediction_tokens,
            "rejected_prediction_tokens": s.rejected_prediction_tokens,
            "engine_finish_reason": s.finish_reason,
        }

    def timings(self) -> dict[str, Any]:
        """llama-server's `timings` field, so tools written for it read ours."""
        s = self.finish.stats if self.finish else None
        if s is None:
            return {}
        prompt_n = self.prefilled if self.prefilled is not None else 0
        return {
            "prompt_n": prompt_n, "prompt_ms": s.prefill_ms,
            "prompt_per_second": prompt_n / (s.prefill_ms / 1000.0) if s.prefill_ms > 0 else 0.0,
            "predicted_n": s.n_tokens, "predicted_ms": s.decode_ms, "predicted_per_second": s.tokens_per_second,
            "draft_n": s.drafted, "draft_n_accepted": s.accepted,
        }


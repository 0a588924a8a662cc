"""Side by side: the same prompt decoded plainly and speculatively on the same target.

Timing is fair by construction: the worker runs the two one after the other (plain first), never
at the same time, and each pane streams live while its own run is measured. Afterwards "Replay side
by side" plays both back together, each at its measured pace (step times scaled to its decode
time), so the speed difference can be seen at a glance. The UI says this in words, too.
"""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.chat.conversations import Message, number_pairs, records_from_events
from app.engine.events import Event, FinishEvent, StepEvent
from app.engine.parting import NotReplayed, first_divergence
from ui.base.tints import tint
from ui.base.worker import PartingCheck
from ui.chat.transcript_view import TranscriptView

RUNS = ("plain", "spec")
TIMING_NOTE = (
    "Plain and speculative decoding run <b>one after the other</b> on the same target, never at "
    "the same time; each pane streams live while its own run is timed. <b>Replay</b> plays both "
    "together at their measured speeds."
)
BADGE_STYLES = {  # (light background, dark text, accent: Okabe-Ito, as the token colours)
    "same": ("#E3F4EE", "#00573F", "#009E73"),
    "tie": ("#FFF4E0", "#5C3B00", "#E69F00"),
    "diff": ("#FBE9E2", "#6B1E00", "#D55E00"),
    "info": ("#E8F1FA", "#0B3D66", "#0072B2"),
}


class _Run:
    def __init__(self) -> None:
        self.message = Message("assistant", "", tokens=[], ghosts=[])
        self.steps: list[tuple[float, int]] = []  # (cumulative draft + verify ms, tokens so far)
        self.finish: FinishEvent | None = None
        self.saved_pace: list[list[float]] | None = None  # a stored comparison's pace()
        self._ms = 0.0

    def add(self, events: list[Event]) -> tuple[list[list], list[list]]:
        for e in events:
            if isinstance(e, StepEvent):
                self._ms += e.draft_ms + e.verify_ms
                self.steps.append((self._ms, e.position + e.emitted))
        tokens, ghosts = records_from_events(events)
        self.message.append_tokens(len(self.message.tokens or []), tokens, ghosts)
        return tokens, ghosts

    def pace(self) -> list[list[float]]:
        """[[ms into the decode, tokens shown by then], ...]: step times scaled to the decode time,
        stored with a comparison so it can be replayed after a restart."""
        if self.saved_pace is not None:
            return self.saved_pace
        if not self.steps or self.finish is None:
            return []
        scale = self.finish.stats.decode_ms / self.steps[-1][0] if self.steps[-1][0] > 0 else 1.0
        return [[round(ms * scale, 2), n] for ms, n in self.steps]

    def count_at(self, elapsed_ms: float) -> int:
        """Tokens shown `elapsed_ms` into a replay at this run's measured pace."""
        count = 0
        for ms, n in self.pace():
            if ms > elapsed_ms:
                break
            count = int(n)
        return count


class CompareView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        note = QLabel(TIMING_NOTE)
        note.setWordWrap(True)
        self._titles = {name: QLabel() for name in RUNS}
        self.views = {name: TranscriptView() for name in RUNS}
        self.views["plain"].setAccessibleName("Plain decoding reply")
        self.views["spec"].setAccessibleName("Speculative reply")
        grid = QGridLayout()
        for col, name in enumerate(RUNS):
            self._titles[name].setTextFormat(Qt.TextFormat.RichText)
            grid.addWidget(self._titles[name], 0, col)
            grid.addWidget(self.views[name], 1, col)
        self.speedup = QLabel()
        self.badge = QLabel()
        self.badge.setWordWrap(True)
        self.badge.setTextFormat(Qt.TextFormat.RichText)
        self.replay_button = QPushButton("▶ Replay side by side")
        self.replay_button.setEnabled(False)
        verdict = QHBoxLayout()
        verdict.addWidget(self.speedup)
        verdict.addWidget(self.badge, 1)
        verdict.addWidget(self.replay_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(note)
        layout.addLayout(grid, 1)
        layout.addLayout(verdict)
        self._runs: dict[str, _Run] = {}
        self._mode = "draft"
        self._greedy = True
        self._checking = False  # a parting's replay is running on the worker
        self._replay_record: dict[str, Any] | None = None  # what it found (_parting_record)
        self._replay_t0 = 0.0
        self._replay_shown: dict[str, int] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(30)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.replay_button.clicked.connect(self._on_replay_button_clicked)
        self.begin("draft", True)

    # --- a new comparison --------------------------------------------------------------------------

    def begin(self, mode: str, greedy: bool) -> None:
        self._timer.stop()
        self._mode, self._greedy = mode, greedy
        self._checking, self._replay_record = False, None
        self._runs = {name: _Run() for name in RUNS}
        for name in RUNS:
            self.views[name].set_messages([])
            self._set_title(name, "waiting" if name == "spec" else "")
        self.speedup.setText("")
        self._set_badge("", "info")
        self.replay_button.setEnabled(False)

    def start_run(self, name: str) -> None:
        self.views[name].begin_reply(self._runs[name].message)
        self._set_title(name, "generating…")

    def append(self, name: str, events: list[Event]) -> None:
        run = self._runs[name]
        tokens, ghosts = run.add(events)
        self.views[name].append_records(tokens, ghosts)
        if run.steps and run.steps[-1][0] > 0:
            self._set_title(name, f"~{run.steps[-1][1] / (run.steps[-1][0] / 1000):.1f} tok/s")

    def finish_run(self, name: str, finish: FinishEvent) -> None:
        run = self._runs[name]
        run.finish = finish
        run.message.stats = {
            "n_tokens": finish.stats.n_tokens,
            "tokens_per_second": finish.stats.tokens_per_second,
            "drafted": finish.stats.drafted,
            "acceptance_rate": finish.stats.acceptance_rate,
            "finish_reason": finish.stats.finish_reason,
        }
        self.views[name].finish_reply()
        self._set_title(name, f"{finish.stats.tokens_per_second:.1f} tok/s")
        if name == "spec":
            self._verdict()

    def error(self, text: str) -> None:
        self._set_badge(html.escape(text), "diff")

    # --- the verdict ---------------------------------------------------------------------------------

    def result(self) -> dict[str, Any] | None:
        """What is stored with the message: the plain run and the verdict."""
        plain, spec = self._runs["plain"].finish, self._runs["spec"].finish
        if plain is None or spec is None:
            return None
        div = first_divergence(plain, spec) if self._greedy else None
        divergence: dict[str, Any] | None = None
        if div is not None:
            divergence = {"position": div.position, "margin": div.margin, "near_tie": div.near_tie}
            if self._replay_record is not None:
                divergence["replay"] = self._replay_record
        return {
            "plain": {
                "tokens": self._runs["plain"].message.tokens,
                "stats": self._runs["plain"].message.stats,
                "pace": self._runs["plain"].pace(),
            },
            "spec_pace": self._runs["spec"].pace(),
            "speedup": self._speedup(),
            "greedy": self._greedy,
            "identical": self._greedy and div is None,
            "divergence": divergence,
        }

    def parting_checking(self) -> None:
        """The worker replays the speculative run's batches up to the parting (shown until it reports)."""
        self._checking = True
        self._verdict()

    def parting_checked(self, check: PartingCheck) -> None:
        self._checking = False
        self._replay_record = _parting_record(check)
        self._verdict()

    def _speedup(self) -> float:
        plain, spec = self._runs["plain"].finish, self._runs["spec"].finish
        if plain is None or spec is None or plain.stats.tokens_per_second <= 0:
            return 0.0
        return spec.stats.tokens_per_second / plain.stats.tokens_per_second

    def _verdict(self) -> None:
        result = self.result()
        if result is not None:
            self.replay_button.setEnabled(True)
            self._show_verdict(result, self._runs["spec"].message.stats or {})

    def show_saved(self, reply: Message) -> None:
        """A stored comparison (conversation switched): both texts, both speeds and the verdict."""
        saved = reply.compare or {}
        plain = saved.get("plain") or {}
        self.begin(reply.mode or "draft", bool(saved.get("greedy", True)))
        self._runs["plain"].message = Message("assistant", "", tokens=plain.get("tokens") or [], ghosts=[],
                                              stats=plain.get("stats"))
        self._runs["spec"].message = reply
        self._runs["plain"].saved_pace = _valid_pace(plain.get("pace"))
        self._runs["spec"].saved_pace = _valid_pace(saved.get("spec_pace"))
        for name in RUNS:
            message = self._runs[name].message
            self.views[name].set_messages([message])
            speed = (message.stats or {}).get("tokens_per_second")
            self._set_title(name, f"{speed:.1f} tok/s" if speed is not None else "")
        if saved:
            self._show_verdict(saved, reply.stats or {})
        # Comparisons saved before their pace was stored have nothing to replay.
        self.replay_button.setEnabled(all(self._runs[n].saved_pace for n in RUNS))

    def _show_verdict(self, result: dict[str, Any], spec_stats: dict[str, Any]) -> None:
        self.speedup.setText(f"<b>Speedup ×{result.get('speedup', 0.0):.2f}</b>")
        reasons = ((result.get("plain") or {}).get("stats") or {}).get("finish_reason"), spec_stats.get("finish_reason")
        if "cancelled" in reasons:
            self._set_badge("Stopped early: the outputs are not compared.", "info")
            return
        if not result.get("greedy", True):
            self._set_badge("Sampled run (temperature &gt; 0): outputs differ by design; speculative sampling "
                            "keeps the target's distribution, not its exact tokens.", "info")
            return
        div = result.get("divergence")
        if result.get("identical") or not div:
            n = len(self._runs["spec"].message.tokens or [])
            self._set_badge(f"✓ Token-identical: all {n} tokens match plain decoding.", "same")
            return
        position, margin = div["position"], div["margin"]
        diff = self._diff_html(position)
        replay = div.get("replay") if isinstance(div.get("replay"), dict) else None
        if replay is not None and isinstance(replay.get("reproduced"), bool) and isinstance(replay.get("gap"), float):
            gap = replay["gap"]
            if replay["reproduced"]:
                self._set_badge(f"≈ Parted at token {position}: the target's own choice. Replayed in the speculative "
                                f"run's own verify batches, the target ranks this run's token first there (by "
                                f"{-gap:.3f}); one token at a time it ranked plain's first (by {margin:.3f}). Its "
                                "kernels round a row a little differently by batch shape, so both replies are the "
                                f"target's own. {diff}", "tie")
            else:
                self._set_badge(f"✗ Parted at token {position}, not by rounding: replayed in the speculative run's "
                                "own verify batches, the target ranks another token first there (plain's token "
                                f"against this run's: {gap:+.3f}), so the run emitted a token its own batches do not "
                                "compute: an engine fault. Please report it with this chat (Export chat as JSON). "
                                f"{diff}", "diff")
            return
        if self._checking:
            self._set_badge(f"… Parted at token {position} (plain decoding's margin there: {margin:.3f}). Replaying "
                            "the speculative run's own verify batches up to it, to see whether the target itself "
                            f"picks that token there (Stop skips this). {diff}", "info")
            return
        unchecked = f" Not replayed: {html.escape(replay['note'])}." if replay and replay.get("note") else ""
        if div["near_tie"]:
            self._set_badge(f"≈ Parted at token {position} on a floating-point near-tie: plain decoding's top "
                            f"two logits there differ by only {margin:.4f} (&lt; 0.1), so the batched verify "
                            f"pass may round the other way.{unchecked} {diff}", "tie")
        else:
            self._set_badge(f"✗ Parted at token {position} with a clear margin ({margin:.3f}): a real "
                            f"difference.{unchecked} {diff}", "diff")

    def _diff_html(self, position: int) -> str:
        def text(name: str, a: int, b: int) -> str:
            tokens = self._runs[name].message.tokens or []
            return "".join(t[0] for t in tokens[a:b])

        prefix = text("spec", max(position - 8, 0), position)[-40:]
        plain, spec = text("plain", position, position + 6), text("spec", position, position + 6)

        def esc(s: str) -> str:
            return html.escape(s).replace("\n", "⏎")

        plain_bg, plain_fg = tint("#F6D5C2", "#000000", "#D55E00", self.palette())
        spec_bg, spec_fg = tint("#C2E8DC", "#000000", "#009E73", self.palette())
        return (
            f"<br><tt>…{esc(prefix)}<span style='background:{plain_bg}; color:{plain_fg}'>{esc(plain)}</span></tt>"
            " (plain)"
            f"<br><tt>…{esc(prefix)}<span style='background:{spec_bg}; color:{spec_fg}'>{esc(spec)}</span></tt>"
            " (speculative)"
        )

    def _set_badge(self, text: str, kind: str) -> None:
        bg, fg = tint(*BADGE_STYLES[kind], self.palette())
        self.badge.setStyleSheet(f"QLabel {{ background: {bg}; color: {fg}; padding: 4px 8px; }}" if text else "")
        self.badge.setText(text)

    def _set_title(self, name: str, status: str) -> None:
        title = "Plain decoding (none)" if name == "plain" else f"Speculative ({self._mode})"
        self._titles[name].setText(f"<b>{title}</b>" + (f" — {status}" if status else ""))

    def title(self, name: str) -> str:
        return self._titles[name].text()

    # --- replay ----------------------------------------------------------------------------------------

    @Slot()
    def _on_replay_button_clicked(self) -> None:
        for name in RUNS:
            view = self.views[name]
            view.set_messages([])
            view.begin_reply(self._runs[name].message)
        self._replay_shown = dict.fromkeys(RUNS, 0)
        self._replay_t0 = time.monotonic()
        self._timer.start()

    @Slot()
    def _on_timer_timeout(self) -> None:
        elapsed = (time.monotonic() - self._replay_t0) * 1000.0
        running = False
        for name in RUNS:
            run, view = self._runs[name], self.views[name]
            total = len(run.message.tokens or [])
            shown = self._replay_shown[name]
            if shown >= total:
                continue
            count = min(run.count_at(elapsed), total)
            if count > shown:
                ghosts = [g for g in run.message.ghosts or [] if shown <= g[0] < count]
                view.append_records((run.message.tokens or [])[shown:count], ghosts)
                self._replay_shown[name] = count
            if count >= total:
                view.finish_reply()
            else:
                running = True
        if not running:
            self._timer.stop()


def _parting_record(check: PartingCheck) -> dict[str, Any]:
    """What a parting's replay found, as stored in the reply's `compare.divergence.replay`."""
    replay = check.replay
    if isinstance(replay, NotReplayed):
        return {"gap": None, "reproduced": None, "note": replay.why}
    return {"gap": replay.gap, "reproduced": replay.reproduced, "note": ""}


def _valid_pace(value: Any) -> list[list[float]] | None:
    """A stored pace, if it is a non-empty list of [ms, tokens] pairs."""
    pairs = number_pairs(value)
    return [[float(ms), int(n)] for ms, n in pairs] if pairs else None

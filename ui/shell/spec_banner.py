"""The banner that says when speculation is not active, and why."""

from __future__ import annotations

import html
from dataclasses import dataclass
from enum import Enum, auto

from PySide6.QtWidgets import QWidget

from app.engine.draft_policy import STRICT_PREFIX
from app.engine.events import GovernorEvent
from ui.base.message_bar import MessageBar


@dataclass(frozen=True)
class SpecState:
    mode: str  # the mode the next reply uses: draft | lookup | hybrid | mtp | none ("auto" resolved)
    has_draft: bool
    incompatible: str | None = None  # the pair check's reason when the draft was refused
    governor: GovernorEvent | None = None  # the last on/off decision ("disable" shows the banner, "enable" clears it)
    auto: bool = False  # the mode was chosen by "auto"
    gpu_note: str = ""  # the machine has a GPU this llama.cpp build cannot use (gpu_hint's message)
    fallback: str = ""  # the mode the user chose, which these models cannot run (the reply runs `mode` instead)


class BannerChoice(Enum):
    """The banner's buttons (actionTriggered's argument)."""

    CHOOSE_MODELS = auto()  # "Choose models…", "Choose a draft…": the picker
    SPECULATE = auto()  # mode none: back to auto
    TARGET_ONLY = auto()  # an incompatible pair: load the target alone, with prompt lookup


Message = tuple[str, str, tuple[str, BannerChoice] | None]


def banner_message(state: SpecState) -> Message | None:
    """(text, level, action) for a state, or None when speculation is on as asked and no GPU sits idle."""
    base = _speculation_message(state)
    if not state.gpu_note:
        return base
    gpu = f"<b>GPU unused:</b> {html.escape(state.gpu_note)}"
    return (gpu, "warning", None) if base is None else (f"{base[0]}<br>{gpu}", "warning", base[2])


def _speculation_message(state: SpecState) -> Message | None:
    if state.incompatible:
        return (f"<b>Speculation is off: incompatible pair.</b> {html.escape(state.incompatible)}", "warning",
                ("Load the target alone (prompt lookup)", BannerChoice.TARGET_ONLY))
    if state.governor is not None and state.governor.action == "disable":
        g = state.governor
        if g.reason.startswith(STRICT_PREFIX):  # strict exactness, not timing: no probe turns it back on
            return (f"<b>Strict exactness stopped drafting</b> at step {g.step} of this reply: "
                    f"{html.escape(g.reason.removeprefix(STRICT_PREFIX))}", "warning", None)
        return (f"<b>The governor turned drafting off</b> at step {g.step} (it probes now and "
                f"then and turns it back on when drafting pays): {html.escape(g.reason)}", "warning", None)
    if state.auto and state.has_draft and state.mode == "lookup":
        return ("<b>Auto: prompt lookup.</b> On this CPU-only build the draft model costs about half a target "
                "step, so drafting from the conversation's n-grams is faster; pick draft or hybrid to watch the "
                "draft model anyway.", "info", None)
    if state.fallback:
        why = ("the target has no MTP head (NextN layers)" if state.fallback == "mtp"
               else "no draft model is loaded")
        return (f"<b>Mode {html.escape(state.fallback)} is off for these models:</b> {why}, so replies use "
                f"{html.escape(state.mode)}.", "info", ("Choose models…", BannerChoice.CHOOSE_MODELS))
    if state.mode == "mtp":
        return None  # the target drafts for itself: nothing is missing
    if state.mode == "none":
        return ("<b>Plain decoding</b> (mode none): nothing is drafted, every token comes from the target.",
                "info", ("Speculate", BannerChoice.SPECULATE))
    if not state.has_draft:
        return ("<b>No draft model chosen:</b> drafting by prompt lookup (n-grams from the conversation) only.",
                "info", ("Choose a draft…", BannerChoice.CHOOSE_MODELS))
    return None


class SpecBanner(MessageBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, closable=True)
        self.state: SpecState | None = None

    def set_state(self, state: SpecState) -> None:
        self.state = state
        message = banner_message(state)
        if message is None:
            self.hide()
        else:
            self.show_message(*message, rich=True)  # our own markup, no user text in it

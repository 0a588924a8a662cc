"""The banner that says when speculation is not active, and why."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QWidget

from app.engine.events import GovernorEvent
from ui.base.message_bar import MessageBar


@dataclass(frozen=True)
class SpecState:
    mode: str  # the mode the next reply uses: draft | lookup | none
    has_draft: bool
    incompatible: str | None = None  # the pair check's reason when the draft was refused
    governor: GovernorEvent | None = None  # a "disable" decision during the current or last reply


def banner_message(state: SpecState) -> tuple[str, str, tuple[str, str] | None] | None:
    """(text, level, action) for a state, or None when speculation is on as asked."""
    if state.incompatible:
        return (f"<b>Speculation is off: incompatible pair.</b> {state.incompatible}", "warning",
                ("Load the target alone (prompt lookup)", "target_only"))
    if state.governor is not None and state.governor.action == "disable":
        return (f"<b>The governor turned drafting off</b> for the rest of this reply at step "
                f"{state.governor.step}: {state.governor.reason}", "warning", None)
    if state.mode == "none":
        return ("<b>Plain decoding</b> (mode none): nothing is drafted, every token comes from the target.",
                "info", ("Speculate", "speculate"))
    if not state.has_draft:
        return ("<b>No draft model chosen:</b> drafting by prompt lookup (n-grams from the conversation) only.",
                "info", ("Choose a draft…", "picker"))
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
            self.show_message(*message)

"""Terminal rendering of the event stream: the same fate colours as the GUI, as ANSI escapes."""

from __future__ import annotations

import sys
from typing import TextIO

from app.engine.events import (
    Event,
    FinishEvent,
    GenerationStats,
    GovernorEvent,
    StepEvent,
    TokenEvent,
    TokenFate,
    shown_fate,
)
from app.palette import FATE_COLOURS, FATE_LABELS, GHOST_COLOUR, hex_to_rgb

RESET = "\x1b[0m"


def _fg(colour: str) -> str:
    r, g, b = hex_to_rgb(colour)
    return f"\x1b[38;2;{r};{g};{b}m"


class TerminalRenderer:
    """Prints tokens as they stream; rejected drafts appear struck through just before the correction."""

    def __init__(self, out: TextIO = sys.stdout, colour: bool = True, show_rejected: bool = False) -> None:
        self.out = out
        self.colour = colour
        self.show_rejected = show_rejected
        self._pending_ghost = ""

    def __call__(self, event: Event) -> None:
        if isinstance(event, StepEvent):
            self._pending_ghost = event.rejected_text if self.show_rejected else ""
        elif isinstance(event, TokenEvent):
            if event.fate is TokenFate.CORRECTED and self._pending_ghost:
                ghost = self._pending_ghost
                self.out.write(f"{_fg(GHOST_COLOUR)}\x1b[9m{ghost}{RESET}" if self.colour else f"[-{ghost}-]")
                self._pending_ghost = ""
            if self.colour and event.fate is not TokenFate.TARGET:
                fate = shown_fate(event)
                self.out.write(f"{_fg(FATE_COLOURS[fate])}{event.text}{RESET}")
            else:
                self.out.write(event.text)
            self.out.flush()
        elif isinstance(event, GovernorEvent):
            pass  # reported with the statistics, not in the middle of the text
        elif isinstance(event, FinishEvent):
            self.out.write("\n")

    def legend(self) -> str:
        if not self.colour:
            return ""
        parts = [f"{_fg(FATE_COLOURS[f])}{FATE_LABELS[f]}{RESET}" for f in TokenFate if f is not TokenFate.TARGET]
        if self.show_rejected:
            parts.append(f"{_fg(GHOST_COLOUR)}\x1b[9mrejected draft{RESET}")
        return "  ".join(parts)


def format_stats(stats: GenerationStats) -> str:
    draft_ms = stats.draft_prefill_ms
    draft_pass = f", the draft model's pass {draft_ms / 1000:.2f} s of it" if draft_ms else ""
    lines = [
        f"mode {stats.mode}: {stats.n_tokens} tokens, decoded at {stats.tokens_per_second:.2f} tokens/s over "
        f"{stats.decode_ms / 1000:.2f} s (prompt {stats.n_prompt_tokens} tokens in {stats.prefill_ms / 1000:.2f} s, "
        f"{stats.prompt_tokens_per_second:.1f} tokens/s{draft_pass})",
    ]
    if stats.drafted:
        per_pos = " ".join(f"{a:.0%}" for a in stats.per_position_acceptance)
        lines.append(
            f"drafted {stats.drafted}, accepted {stats.accepted} ({stats.acceptance_rate:.1%}), "
            f"mean accepted length {stats.mean_accepted_length:.2f}, {stats.tokens_per_step:.2f} tokens/step; "
            f"acceptance by position: {per_pos}"
        )
    if stats.prediction_tokens:
        lines.append(
            f"prediction: {stats.prediction_tokens} tokens; {stats.accepted_prediction_tokens} accepted, "
            f"{stats.rejected_prediction_tokens} rejected"
        )
    if stats.decode_ms > 0:
        lines.append(
            f"time: draft {stats.draft_ms:.0f} ms ({stats.draft_ms / stats.decode_ms:.0%}), verify "
            f"{stats.verify_ms:.0f} ms ({stats.verify_ms / stats.decode_ms:.0%}); engine overhead outside "
            f"llama.cpp {stats.python_ms:.0f} ms ({stats.python_ms / stats.decode_ms:.1%}); {stats.steps} steps"
        )
    for event in stats.governor:
        what = "copy governor" if event.scope == "copy" else "governor"
        lines.append(f"{what} at step {event.step}: {event.action} - {event.reason}")
    if stats.mode != "none" and not stats.speculation_active:
        lines.append("speculation was off at the end of this reply: turned off (see above)")
    lines.append(f"finished: {stats.finish_reason}")
    return "\n".join(lines)

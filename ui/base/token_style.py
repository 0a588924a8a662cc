"""Character formats for tokens and ghosts, shared by the live transcript and the Markdown render.

A token's fate is shown as a translucent background tint of its palette colour, so the text keeps
the theme's own colour (readable in light and dark) and code keeps its syntax colours on top. The
fate and the token's step, index and p/q ride along as user properties for the hover tooltips.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextFormat

from app.chat.conversations import CODE_FATES
from app.engine.events import TokenFate
from app.palette import FATE_COLOURS, FATE_LABELS, GHOST_COLOUR

PROP_FATE = QTextFormat.Property.UserProperty + 1  # fate code: "a", "c", "b", "t"
PROP_STEP = QTextFormat.Property.UserProperty + 2
PROP_INDEX = QTextFormat.Property.UserProperty + 3  # token index in its reply
PROP_P = QTextFormat.Property.UserProperty + 4
PROP_Q = QTextFormat.Property.UserProperty + 5
PROP_MSG = QTextFormat.Property.UserProperty + 6  # message index in the conversation
PROP_GHOST = QTextFormat.Property.UserProperty + 7  # True on rejected draft text

# Plain target tokens get a fainter tint: nothing was verified there, it is the baseline.
TINT_ALPHA: dict[TokenFate, float] = {
    TokenFate.ACCEPTED: 0.32,
    TokenFate.CORRECTED: 0.32,
    TokenFate.BONUS: 0.32,
    TokenFate.TARGET: 0.16,
    TokenFate.PREDICTED: 0.32,
    TokenFate.MTP: 0.5,  # yellow is light: a stronger tint to show as much as the others
}


def tint(fate: TokenFate) -> QColor:
    colour = QColor(FATE_COLOURS[fate])
    colour.setAlphaF(TINT_ALPHA[fate])
    return colour


def blend_over(colour: QColor, base: QColor) -> QColor:
    """The opaque colour a translucent `colour` paints over `base` (what a screenshot shows)."""
    a = colour.alphaF()
    return QColor(
        round(colour.red() * a + base.red() * (1 - a)),
        round(colour.green() * a + base.green() * (1 - a)),
        round(colour.blue() * a + base.blue() * (1 - a)),
    )


def token_format(record: list, index: int, msg: int, colours: bool, base: QTextCharFormat | None = None
                 ) -> QTextCharFormat:
    """Format for one token record [text, code, step, (p, q)]."""
    fmt = QTextCharFormat(base) if base is not None else QTextCharFormat()
    code = record[1]
    if colours:
        fmt.setBackground(tint(CODE_FATES[code]))
    fmt.setProperty(PROP_FATE, code)
    fmt.setProperty(PROP_STEP, int(record[2]))
    fmt.setProperty(PROP_INDEX, index)
    fmt.setProperty(PROP_MSG, msg)
    if len(record) >= 5:
        if record[3] is not None:
            fmt.setProperty(PROP_P, float(record[3]))
        if record[4] is not None:
            fmt.setProperty(PROP_Q, float(record[4]))
    return fmt


def ghost_format(step: int | None, base: QTextCharFormat | None = None) -> QTextCharFormat:
    fmt = QTextCharFormat(base) if base is not None else QTextCharFormat()
    fmt.setForeground(QColor(GHOST_COLOUR))
    fmt.setFontStrikeOut(True)
    fmt.clearBackground()
    fmt.setProperty(PROP_GHOST, True)
    if step is not None:
        fmt.setProperty(PROP_STEP, step)
    return fmt


def ghost_text(text: str) -> str:
    # A rejected newline would break the line it explains; show it as a visible mark instead.
    return text.replace("\r", "").replace("\n", "⏎").replace("\t", "→")


def tooltip(fmt: QTextCharFormat) -> str:
    if fmt.boolProperty(PROP_GHOST):
        step = fmt.property(PROP_STEP)
        where = f" at step {step}" if step is not None else ""
        return (f"Rejected draft{where}: the draft guessed this text, the target disagreed; "
                "the token after it is the target's correction.")
    code = fmt.property(PROP_FATE)
    if code is None:
        return ""
    fate = CODE_FATES[str(code)]
    lines = [f"Token {fmt.intProperty(PROP_INDEX)} · step {fmt.intProperty(PROP_STEP)}", FATE_LABELS[fate]]
    p, q = fmt.property(PROP_P), fmt.property(PROP_Q)
    if p is not None:
        lines.append(f"p (target) = {float(p):.3f}" + (f" · q (draft) = {float(q):.3f}" if q is not None else ""))
    return "\n".join(lines)


def set_monospace(fmt: QTextCharFormat, family: str) -> None:
    fmt.setFontFamilies([family])
    fmt.setFontStyleHint(QFont.StyleHint.Monospace)
    fmt.setFontFixedPitch(True)

"""Insert a finished reply as Markdown into a QTextDocument, keeping every token's colour.

`markdown_runs.parse` says which source character each visible character came from; here each
character is mapped to the token that produced it, so headings, lists and syntax-highlighted code
keep the fate tints and tooltips of the live reply. Ghosts go before the first visible character
of their corrected token (or of the next token, when that one was pure markup).

A streaming reply is rendered a span at a time (ui.chat.reply_stream: each span is whole finished
blocks, markdown_runs.finished_prefix); the ghosts a span could not place yet go to the next one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from functools import lru_cache

from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextLength,
)

from ui.base.token_style import ghost_format, ghost_text, set_monospace, token_format
from ui.chat.markdown_runs import Block, Run, iter_blocks

RUNS_PER_STEP = 32
CHUNKS_PER_STEP = 64
HEADING_SCALE = {1: 1.45, 2: 1.3, 3: 1.15, 4: 1.05, 5: 1.0, 6: 1.0}
CODE_BG = {False: "#F3F4F6", True: "#2A2D33"}
DIM = {False: "#6B6B6B", True: "#A0A0A0"}
LINK = {False: "#0B62C4", True: "#6CB6FF"}


@lru_cache(maxsize=4)
def _pygments_colours(dark: bool) -> dict[_TokenType, tuple[str | None, bool, bool]]:
    style = get_style_by_name("github-dark" if dark else "default")
    return {ttype: (f"#{s['color']}" if s["color"] else None, bool(s["bold"]), bool(s["italic"]))
            for ttype, s in style}


def monospace_family() -> str:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()


class ReplyRenderer:
    """Renders one reply's records at a cursor; remembers where each token landed (for tests/tooltips)."""

    def __init__(self, cursor: QTextCursor, tokens: list[list], ghosts: list[list], msg: int, *,
                 colours: bool, show_ghosts: bool, dark: bool, base_point_size: float,
                 span: tuple[int, int] | None = None, first_ghost: int = 0, final: bool = True,
                 source: str | None = None, starts: list[int] | None = None) -> None:
        """`span`: render only these source characters (whole blocks); `first_ghost`: how many
        (sorted) ghosts earlier spans placed; `final`: the reply ends with this span, so ghosts
        that no token showed go at its end (else they wait for a later span). `source` and
        `starts` (each token's offset in it), when the caller keeps them, save joining every token."""
        self.cursor = cursor
        self.tokens = tokens
        self.msg = msg
        self.colours = colours
        self.dark = dark
        self.base_pt = base_point_size
        self.mono = monospace_family()
        self.ghosts = sorted(ghosts, key=lambda g: g[0]) if show_ghosts else []
        self.next_ghost = first_ghost  # ghosts placed so far
        self.positions: dict[int, int] = {}  # token index -> document position of its first character
        if starts is None:
            starts, at = [], 0
            for record in tokens:
                starts.append(at)
                at += len(record[0])
        self._starts = starts
        self._source = source
        self.span = span
        self.final = final
        self.blocks = 0  # blocks begun
        self._shift = span[0] if span else 0  # source offset of the span's first character

    def render(self) -> None:
        for _ in self.steps():
            pass

    def steps(self) -> Iterator[None]:
        """Render run by run, yielding every few runs (so a long reply can be time-sliced)."""
        source = self._source if self._source is not None else "".join(t[0] for t in self.tokens)
        if self.span is not None:
            source = source[self.span[0]:self.span[1]]
        first = True
        for block in iter_blocks(source):
            self._begin_block(block, first)
            first = False
            for n, run in enumerate(block.runs, 1):
                yield from self._run(run, self._run_format(run, block))
                if n % RUNS_PER_STEP == 0:
                    yield
            yield
        if self.final:
            self._flush_ghosts(len(self.tokens))

    # --- blocks ----------------------------------------------------------------------------------

    def _begin_block(self, block: Block, first: bool) -> None:
        self.blocks += 1
        bf = QTextBlockFormat()
        bf.setIndent(block.indent)
        bf.setTopMargin(2 if block.kind in ("code", "table") else 6)
        if block.kind == "heading":
            bf.setTopMargin(10)
            bf.setHeadingLevel(block.level)
        elif block.kind == "code":
            bf.setBackground(QColor(CODE_BG[self.dark]))
            bf.setLeftMargin(6)
        elif block.kind == "hr":
            bf.setProperty(QTextFormat.Property.BlockTrailingHorizontalRulerWidth,
                           QTextLength(QTextLength.Type.PercentageLength, 100))
        if first:
            self.cursor.setBlockFormat(bf)
        else:
            self.cursor.insertBlock(bf, QTextCharFormat())

    def _run_format(self, run: Run, block: Block) -> QTextCharFormat:
        fmt = QTextCharFormat()
        if block.kind == "heading":
            fmt.setFontWeight(QFont.Weight.Bold)
            fmt.setFontPointSize(self.base_pt * HEADING_SCALE.get(block.level, 1.0))
        elif block.kind == "quote":
            fmt.setFontItalic(True)
            fmt.setForeground(QColor(DIM[self.dark]))
        if "bold" in run.style:
            fmt.setFontWeight(QFont.Weight.Bold)
        if "italic" in run.style:
            fmt.setFontItalic(True)
        if "strike" in run.style:
            fmt.setFontStrikeOut(True)
        if "dim" in run.style:
            fmt.setForeground(QColor(DIM[self.dark]))
        if "code" in run.style:
            set_monospace(fmt, self.mono)
        if run.href is not None:
            fmt.setAnchor(True)
            fmt.setAnchorHref(run.href)
            fmt.setFontUnderline(True)
            fmt.setForeground(QColor(LINK[self.dark]))
        if run.ttype is not None:
            self._syntax(fmt, run.ttype)
        return fmt

    def _syntax(self, fmt: QTextCharFormat, ttype: _TokenType) -> None:
        table = _pygments_colours(self.dark)
        while ttype not in table and ttype.parent is not None:
            ttype = ttype.parent
        colour, bold, italic = table.get(ttype, (None, False, False))
        if colour:
            fmt.setForeground(QColor(colour))
        if bold:
            fmt.setFontWeight(QFont.Weight.Bold)
        if italic:
            fmt.setFontItalic(True)

    # --- text ------------------------------------------------------------------------------------

    def _owner(self, offset: int) -> int | None:
        if offset < 0 or not self._starts:
            return None
        return bisect.bisect_right(self._starts, offset + self._shift) - 1

    def _run(self, run: Run, base: QTextCharFormat) -> Iterator[None]:
        """One run, split where the producing token changes; yields now and then (a paragraph can
        hold thousands of tokens)."""
        chunk: list[str] = []
        owner: int | None = None
        emitted = 0
        for ch, offset in zip(run.text, run.offsets, strict=False):
            t = self._owner(offset)
            if chunk and t != owner:
                self._emit("".join(chunk), owner, base)
                chunk = []
                emitted += 1
                if emitted % CHUNKS_PER_STEP == 0:
                    yield
            owner = t
            chunk.append(ch)
        if chunk:
            self._emit("".join(chunk), owner, base)

    def _emit(self, text: str, token: int | None, base: QTextCharFormat) -> None:
        if token is None:
            self.cursor.insertText(text, base)
            return
        self._flush_ghosts(token, base)
        self.positions.setdefault(token, self.cursor.position())
        self.cursor.insertText(text, token_format(self.tokens[token], token, self.msg, self.colours, base))

    def _flush_ghosts(self, upto: int, base: QTextCharFormat | None = None) -> None:
        while self.next_ghost < len(self.ghosts) and self.ghosts[self.next_ghost][0] <= upto:
            position, text = self.ghosts[self.next_ghost][:2]
            self.next_ghost += 1
            step = self.tokens[position][2] if position < len(self.tokens) else None
            self.cursor.insertText(ghost_text(text), ghost_format(step, base))

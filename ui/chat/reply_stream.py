"""One streaming reply in the transcript's document: Markdown for each block as soon as it is final.

Tokens arrive as raw tinted text at the end of the document. Whenever the source gains whole
blocks that no later text can change (markdown_runs.finished_prefix: a paragraph and its blank
line, a closed fence, a heading, a list that something else followed), those blocks are rendered
as Markdown by the same ReplyRenderer a finished reply uses and put in place of their raw text;
only the block still open stays raw. When the reply ends, only that tail is rendered, so nothing
above it moves. Each span renders in a detached document (the view time-slices it, as raw tokens
keep arriving below it) and goes in as one fragment.

Document positions count UTF-16 code units; source offsets count characters (an emoji is one
character and two positions), hence `_units`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtGui import QTextCursor, QTextDocument, QTextDocumentFragment

from ui.base.token_style import ghost_format, ghost_text, token_format
from ui.chat.markdown_render import ReplyRenderer
from ui.chat.markdown_runs import finished_prefix


def _units(text: str) -> int:
    """Document positions `text` takes (UTF-16 code units)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


@dataclass
class Span:
    """A span of the reply being rendered in a detached document."""

    doc: QTextDocument
    renderer: ReplyRenderer
    steps: Iterator[None]
    end: int  # source characters up to here
    final: bool


class ReplyStream:
    """The raw tail, the rendered head and where each token is, for reply `index`."""

    def __init__(self, index: int, start: int, *, colours: bool, show_ghosts: bool) -> None:
        self.index = index
        self.colours = colours
        self.show_ghosts = show_ghosts
        self.tokens: list[list] = []
        self.ghosts: list[list] = []
        self.starts: list[int] = []  # source offset of each token
        self.source = ""
        self.start = start  # document position of the reply's first character
        self.done_char = 0  # source[:done_char] is on screen as Markdown, the rest raw
        self.done_pos = start  # document position where the raw text of source[done_char:] begins
        self.next_char = 0  # where the next span starts (past a span still being rendered)
        self.final_char = 0  # source[:final_char] is whole finished blocks
        self.raw_at: dict[int, int] = {}  # raw token -> position of its raw text (from done_char)
        self.rendered: dict[int, int] = {}  # token -> position of its first rendered character
        self.positions: dict[int, int] = {}  # what the view reports: rendered, else raw
        self.placed_ghosts = 0  # (sorted) ghosts placed by rendered spans
        self.pending_ghosts: dict[int, list[str]] = {}  # ghosts before tokens yet to come
        self.finished = False

    # --- raw tokens --------------------------------------------------------------------------------

    def append(self, cursor: QTextCursor, tokens: list[list], ghosts: list[list]) -> None:
        """Raw text at `cursor` (the document's end), each token tinted; ghosts before their token."""
        for position, text in ghosts:
            self.pending_ghosts.setdefault(position, []).append(text)
            self.ghosts.append([position, text])
        added: list[str] = []
        for record in tokens:
            index = len(self.tokens)
            for text in self.pending_ghosts.pop(index, []) if self.show_ghosts else ():
                cursor.insertText(ghost_text(text), ghost_format(record[2]))
            self.raw_at[index] = self.positions[index] = cursor.position()
            cursor.insertText(record[0], token_format(record, index, self.index, self.colours))
            self.tokens.append(record)
            self.starts.append(len(self.source) + sum(map(len, added)))
            added.append(record[0])
        new = "".join(added)
        self.source += new
        if "\n" in new:  # only a finished line can finish a block
            self.final_char = self.next_char + finished_prefix(self.source[self.next_char:])

    def ready(self) -> bool:
        """Whether a span waits to be rendered (finished blocks, or the tail of a finished reply)."""
        return self.finished and self.next_char <= len(self.source) or self.final_char > self.next_char

    def finish(self, tokens: list[list], ghosts: list[list]) -> None:
        """The reply has ended: its own records (the last token may have gained a UTF-8 tail)."""
        self.finished = True
        if len(tokens) != len(self.tokens):  # not what was shown (never in the app): count afresh
            self.starts = list(itertools.accumulate((len(t[0]) for t in tokens[:-1]), initial=0)) if tokens else []
        self.tokens, self.ghosts = tokens, ghosts
        self.source = "".join(t[0] for t in tokens)

    # --- rendered spans ----------------------------------------------------------------------------

    def next_span(self, doc: QTextDocument, style: dict[str, Any]) -> Span:
        """The next span to render into `doc`: the finished blocks, or after the end the tail."""
        final = self.finished
        end = len(self.source) if final else self.final_char
        renderer = ReplyRenderer(QTextCursor(doc), self.tokens, self.ghosts, self.index, **style,
                                 span=(self.next_char, end), first_ghost=self.placed_ghosts, final=final,
                                 source=self.source, starts=self.starts)
        self.next_char = end + (1 if final else 0)  # past the end: nothing is ready after the tail
        return Span(doc, renderer, renderer.steps(), end, final)

    def apply(self, document: QTextDocument, span: Span) -> QTextCursor:
        """Put a rendered span in place of its raw text; returns a cursor after it."""
        cursor = QTextCursor(document)
        cursor.setPosition(self.done_pos)
        separator = -1
        # Only blank lines were left: no empty block, and leftover ghosts end the last block.
        merge = span.final and self.done_char > 0 and not span.renderer.blocks
        if span.final:
            if merge:
                cursor.setPosition(self.done_pos - 1)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        else:
            # The span ends with a line break: its block separator stays, and the raw text after it.
            separator = self._raw_position(span.end - 1)
            cursor.setPosition(separator, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if span.renderer.blocks or not span.doc.isEmpty():  # a rule is one empty block
            first = span.doc.begin().blockFormat()  # insertFragment keeps the target block's format
            cursor.insertFragment(QTextDocumentFragment(span.doc))
            if not merge:
                head = QTextCursor(document)
                head.setPosition(self.done_pos)
                head.setBlockFormat(first)
        elif not span.final:
            cursor.deleteChar()  # nothing to show (a link definition): the raw rest moves up
            cursor.setPosition(cursor.position() - 1)  # where the separator was, as if kept
        for token, pos in span.renderer.positions.items():
            if token not in self.rendered:  # a token split by the span's end shows where it began
                self.rendered[token] = self.positions[token] = pos + self.done_pos
        self.placed_ghosts = span.renderer.next_ghost
        if span.final:
            self.raw_at.clear()
            self.positions.clear()
            self.positions.update(self.rendered)
            return cursor
        self._move_raw(span.end, cursor.position() - separator)
        self.done_char, self.done_pos = span.end, cursor.position() + 1
        return cursor

    def _raw_position(self, char: int) -> int:
        """Document position of source character `char` (in the raw tail)."""
        token = bisect.bisect_right(self.starts, char) - 1
        return self.raw_at[token] + _units(self.source[max(self.starts[token], self.done_char):char])

    def _move_raw(self, end: int, shift: int) -> None:
        """Raw text before source character `end` was replaced by its rendering, which moved the
        raw text after it (from the kept separator on) by `shift`."""
        first = self._raw_position(end) if end < len(self.source) else -1  # before the move
        for token in list(self.raw_at):
            start = self.starts[token]
            if start + len(self.tokens[token][0]) <= end:
                del self.raw_at[token]  # all rendered
                if token not in self.rendered:
                    self.positions.pop(token, None)  # pure markup: nothing of it is on screen
            elif start < end:
                self.raw_at[token] = first + shift  # its rest begins the raw tail
            else:
                self.raw_at[token] += shift
        for token, pos in self.raw_at.items():
            self.positions[token] = self.rendered.get(token, pos)

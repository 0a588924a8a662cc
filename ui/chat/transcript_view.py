"""The conversation as one coloured token document.

While a reply streams, its tokens are appended as raw text, each tinted by its fate, with rejected
drafts struck through before the target's correction; each Markdown block is rendered in place
(ui.chat.markdown_render, same tints) as soon as it is finished, so only the open block is raw and
the end of the reply re-renders only that (ui.chat.reply_stream). Hovering shows a token's step,
source and, for sampled runs, p and q.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import shiboken6
from PySide6.QtCore import QEvent, QMimeData, QPointF, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QHelpEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QTextBrowser, QToolTip, QWidget

from app.chat.conversations import Message
from app.chat.export import message_meta
from ui.base.token_style import PROP_FATE, PROP_GHOST, tooltip
from ui.chat.markdown_render import DIM, ReplyRenderer
from ui.chat.reply_stream import ReplyStream, Span

RENDER_SLICE_S = 0.010  # Markdown rendering per event-loop turn: the GUI never stalls on a long reply
REBUILD_SLICE_S = 0.030  # whole-chat rebuilds: a slice ends after the message that passes this
SYNC_REBUILD_CHARS = 8000  # a chat this short is rebuilt at once: on a loaded machine a deadline alone left
# even a two-message chat half-built for a tick (and tests that read it at once saw nothing)
SHOWN_MESSAGES = 40  # messages a chat opens with; older ones come with "Show earlier messages"
ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System"}
EXTERNAL_SCHEMES = ("http", "https", "mailto")  # links the browser may open; nothing else navigates
ACTION_SCHEME = "specchat"  # specchat:ACTION/INDEX, the per-message controls
PROP_ACTION = QTextCharFormat.Property.UserProperty + 20  # on control links: left out of copies


class MessageAction(Enum):
    """A per-message control link; the value is the link's ACTION in specchat:ACTION/INDEX."""

    EDIT = "edit"
    COPY = "copy"
    DELETE = "delete"
    REGENERATE = "regenerate"
    CONTINUE = "continue"
    SYSTEM = "system"  # the system prompt's Edit (index -1)
    MORE = "more"  # "Show earlier messages": handled by the view itself, never emitted


Controls = tuple[tuple[MessageAction, str], ...]  # (action, link text)
USER_ACTIONS: Controls = ((MessageAction.EDIT, "Edit"), (MessageAction.COPY, "Copy"),
                          (MessageAction.DELETE, "Delete"))
REPLY_ACTIONS: Controls = ((MessageAction.COPY, "Copy"), (MessageAction.REGENERATE, "Regenerate"),
                           (MessageAction.DELETE, "Delete"))
def footer_text(message: Message) -> str:
    s = message.stats or {}
    parts = []
    if s:
        n = s.get("n_tokens", 0)
        parts.append(f"{n} tokens · {s.get('tokens_per_second', 0.0):.1f} tok/s" if n else "0 tokens")
        if s.get("prefill_ms") and n:  # what LM Studio calls time to first token: the prompt's processing
            parts.append(f"first token after {s['prefill_ms'] / 1000:.1f} s")
        if s.get("drafted"):
            parts.append(f"{s.get('acceptance_rate', 0.0):.0%} of drafts accepted")
        reason = s.get("finish_reason")
        if reason and reason != "stop":
            parts.append({"length": "stopped at the token limit", "cancelled": "stopped by you",
                          "context": "context full"}.get(reason, reason))
    if message.status == "interrupted":
        parts.append("interrupted: the app closed before this reply finished")
    if message.error:
        parts.append(f"error: {message.error}")
    return " · ".join(parts)


@dataclass
class _Rebuild:
    doc: QTextDocument
    positions: dict[int, dict[int, int]]
    steps: Iterator[None]
    to_bottom: bool


@dataclass
class _RenderJob:
    stream: ReplyStream
    span: Span
    rendered: bool = False  # all steps done: the span waits to go in


class TranscriptView(QTextBrowser):
    """Read-only transcript; one instance per pane (chat, and each side of a comparison)."""

    rendered = Signal()  # a finished reply's Markdown rendering is in the document (its last span)
    messageAction = Signal(object, int)  # (MessageAction, message index)

    def __init__(self, parent: QWidget | None = None, actions: bool = False) -> None:
        super().__init__(parent)
        self.setAccessibleName("Conversation")
        # The widget never follows a link itself: a relative link in a reply would replace the
        # whole transcript with a file. Web links go to the desktop's browser, controls to us.
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchorClicked)
        self._actions = actions
        self._system = ""
        self.setUndoRedoEnabled(False)
        self.setPlaceholderText("Ask something below: each token of the reply is tinted by its fate.")
        self.document().setIndentWidth(18)
        self.document().setDocumentMargin(12)
        self._colours = True
        self._ghosts = True
        self._messages: list[Message] = []
        self._reply_msg = -1
        self._stream: ReplyStream | None = None  # the reply streaming, or finished and not yet rendered
        self._positions: dict[int, dict[int, int]] = {}  # message -> token -> document position
        self._job: _RenderJob | None = None
        self._rebuild: _Rebuild | None = None
        self._shown = SHOWN_MESSAGES
        self._render_timer = QTimer(self)
        self._render_timer.setInterval(0)
        self._render_timer.timeout.connect(self._on_render_timer_timeout)
        # Stay on the newest text while the view is at its end. A banner shown above the transcript, a resize or
        # a document laid out after the swap changes the scroll range without moving the bar: that left it a
        # banner's height short of the end, and a streaming reply then stopped following (seen under Xvfb).
        self._stick = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_vertical_bar_valueChanged)
        bar.rangeChanged.connect(self._on_vertical_bar_rangeChanged)

    @Slot(int)
    def _on_vertical_bar_valueChanged(self, value: int) -> None:
        self._stick = value >= self.verticalScrollBar().maximum() - 4

    @Slot(int, int)
    def _on_vertical_bar_rangeChanged(self, _minimum: int, maximum: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(maximum)

    # --- options ---------------------------------------------------------------------------------

    def set_overlay(self, colours: bool, ghosts: bool) -> None:
        if (colours, ghosts) != (self._colours, self._ghosts):
            self._colours, self._ghosts = colours, ghosts
            self.rerender()

    def is_dark(self) -> bool:
        return self.palette().base().color().lightness() < 128

    # --- whole conversations -----------------------------------------------------------------------

    def set_messages(self, messages: Sequence[Message], system: str = "") -> None:
        self._messages = list(messages)
        self._system = system
        self._reply_msg = -1
        self._shown = SHOWN_MESSAGES
        self.rerender(to_bottom=True)  # a chat opens on its newest messages

    def set_system(self, system: str) -> None:
        if system != self._system:
            self._system = system
            self.rerender()

    @Slot(QUrl)
    def _on_anchorClicked(self, url: QUrl) -> None:
        if url.scheme() == ACTION_SCHEME:
            key, _, index = url.path().partition("/")
            try:
                action = MessageAction(key)
            except ValueError:
                return  # not a link of ours
            if action is MessageAction.MORE:
                self.show_earlier()
            else:
                self.messageAction.emit(action, int(index) if index.lstrip("-").isdigit() else -1)
        elif url.scheme() in EXTERNAL_SCHEMES:
            QDesktopServices.openUrl(url)
        # Anything else (relative paths, file:, javascript:) is ignored: there is nowhere to go.

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 - Qt override
        """Copy the reply's own text: no rejected drafts (ghosts), no control links, no tints."""
        mime = QMimeData()
        mime.setText(self.selected_text())
        return mime

    def selected_text(self) -> str:
        cursor = self.textCursor()
        start, end = cursor.selectionStart(), cursor.selectionEnd()
        return self.plain_text(start, end)

    def plain_text(self, start: int = 0, end: int | None = None) -> str:
        """The document's text between two positions, less ghosts and control links."""
        end = self.document().characterCount() if end is None else end
        parts: list[str] = []
        block = self.document().findBlock(start)
        first = True
        while block.isValid() and block.position() < end:
            if not first:
                parts.append("\n")
            first = False
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                fmt = frag.charFormat()
                lo, hi = max(frag.position(), start), min(frag.position() + frag.length(), end)
                if hi > lo and not fmt.boolProperty(PROP_GHOST) and not fmt.boolProperty(PROP_ACTION):
                    parts.append(frag.text()[lo - frag.position():hi - frag.position()])
                it += 1
            block = block.next()
        return "".join(parts).replace("\u2028", "\n").replace("\u00a0", " ")

    def _controls(self, cursor: QTextCursor, index: int, actions: Controls) -> None:
        if not self._actions:
            return
        dim = QTextCharFormat()
        dim.setForeground(QColor(DIM[self.is_dark()]))
        dim.setProperty(PROP_ACTION, True)
        cursor.insertText("   ", dim)
        for n, (key, label) in enumerate(actions):
            fmt = QTextCharFormat(dim)
            fmt.setAnchor(True)
            fmt.setAnchorHref(f"{ACTION_SCHEME}:{key.value}/{index}")
            fmt.setFontPointSize(max(self.font().pointSizeF() - 1.5, 6.0))
            if n:
                cursor.insertText(" · ", dim)
            cursor.insertText(label, fmt)

    def rerender(self, to_bottom: bool | None = None) -> None:
        """Rebuild the document: the newest SHOWN_MESSAGES messages (a "show earlier" link brings
        more), built in a detached document RENDER_SLICE_S at a time and swapped in at once, so
        opening a 200-message chat or changing the theme never blocks the window for long."""
        self._job = None
        self._rebuild = None
        self._render_timer.stop()
        if self._reply_msg < 0:
            self._stream = None  # a finished reply's pending tail: the rebuild renders it whole
        doc = self._detached(self)
        doc.setDocumentMargin(self.document().documentMargin())
        first = max(0, len(self._messages) - self._shown)
        if self._reply_msg >= 0:
            first = min(first, self._reply_msg)  # the live reply is always in the document
        positions: dict[int, dict[int, int]] = {}
        self._rebuild = _Rebuild(doc, positions, self._build(QTextCursor(doc), first, positions),
                                 self._at_bottom() if to_bottom is None else to_bottom)
        self._on_render_timer_timeout()  # most chats are done in this first slice
        if self._rebuild is not None:
            short = sum(len(m.content) for m in self._messages[first:]) + len(self._system) <= SYNC_REBUILD_CHARS
            if self._reply_msg >= 0 or short:
                self._complete_rebuild()  # short, or tokens are streaming into it: no waiting
            else:
                self._render_timer.start()

    def _build(self, cursor: QTextCursor, first: int, positions: dict[int, dict[int, int]]) -> Iterator[None]:
        if first > 0:
            self._controls(cursor, -1, ((MessageAction.MORE, f"Show {min(first, SHOWN_MESSAGES)} earlier messages "
                                                 f"(of {first})"),))
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        if self._system:
            self._system_block(cursor)
        for i in range(first, len(self._messages)):
            message = self._messages[i]
            if i == self._reply_msg:
                self._begin_reply_at(cursor, i)  # raw again; its finished blocks render after the swap
                assert self._stream is not None
                self._stream.append(cursor, message.tokens or [], message.ghosts or [])
                positions[i] = self._positions.pop(i, {})
            else:
                self._render_message(cursor, i, message, positions)
            yield

    def _swap(self, job: _Rebuild) -> None:
        """Put a finished rebuild on screen."""
        self._rebuild = None
        self._render_timer.stop()
        old = self.document()
        self.setDocument(job.doc)  # Qt deletes the widget's own first document itself
        if shiboken6.isValid(old) and old.parent() is self:
            old.deleteLater()  # one of ours, from an earlier rebuild
        self._positions = job.positions
        if job.to_bottom:
            self._scroll_to_end()
        self.rendered.emit()
        self._schedule()  # a streaming reply's finished blocks

    def show_earlier(self) -> None:
        self._shown += SHOWN_MESSAGES
        self.rerender(to_bottom=False)

    def _system_block(self, cursor: QTextCursor) -> None:
        title = QTextCharFormat()
        title.setFontWeight(QFont.Weight.Bold)
        title.setForeground(QColor(DIM[self.is_dark()]))
        cursor.insertText("System prompt", title)
        self._controls(cursor, -1, ((MessageAction.SYSTEM, "Edit"),))
        body = QTextCharFormat()
        body.setForeground(QColor(DIM[self.is_dark()]))
        body.setFontItalic(True)
        cursor.insertBlock(QTextBlockFormat(), body)
        cursor.insertText(self._system, body)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _render_message(self, cursor: QTextCursor, index: int, message: Message,
                        positions: dict[int, dict[int, int]] | None = None) -> None:
        self._header(cursor, index, message)
        if message.role == "assistant" and message.tokens:
            renderer = ReplyRenderer(cursor, message.tokens, message.ghosts or [], index, **self._style())
            renderer.render()
            (self._positions if positions is None else positions)[index] = renderer.positions
        else:
            cursor.insertText(message.content, QTextCharFormat())
        if message.role == "assistant":
            self._footer(cursor, footer_text(message), index)

    def _reply_actions(self, index: int) -> Controls:
        message = self._messages[index]
        # Offered on every cut reply, not only the last: a footer is drawn once, and a later turn
        # must not make the live document differ from a reload. Only the last one can go on.
        cut = (message.stats or {}).get("finish_reason") == "length" or message.status == "interrupted"
        return (*REPLY_ACTIONS[:2], *(((MessageAction.CONTINUE, "Continue"),) if cut else ()), *REPLY_ACTIONS[2:])

    def _header(self, cursor: QTextCursor, index: int, message: Message) -> None:
        bf = QTextBlockFormat()
        bf.setTopMargin(14 if index else 0)
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        title = ROLE_TITLES.get(message.role, message.role)
        meta = message_meta(message)
        if cursor.position() > 0:
            cursor.insertBlock(bf, fmt)
        else:
            cursor.setBlockFormat(bf)
        cursor.insertText(title, fmt)
        if meta:
            dim = QTextCharFormat()
            dim.setForeground(QColor(DIM[self.is_dark()]))
            cursor.insertText(f"  {meta}", dim)
        if message.role == "user":
            self._controls(cursor, index, USER_ACTIONS)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _footer(self, cursor: QTextCursor, text: str, index: int) -> None:
        """The reply's statistics line, with its controls (added once the reply has ended)."""
        if not text and not self._actions:
            return
        bf = QTextBlockFormat()
        bf.setTopMargin(4)
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(DIM[self.is_dark()]))
        fmt.setFontPointSize(max(self.font().pointSizeF() - 1.5, 6.0))
        cursor.insertBlock(bf, fmt)
        cursor.insertText(text, fmt)
        self._controls(cursor, index, self._reply_actions(index))

    # --- the streaming reply -------------------------------------------------------------------------

    def append_message(self, message: Message) -> int:
        """Add a finished message (a user prompt) at the end; returns its index."""
        self.complete_render()
        index = self._push(message)
        self._render_message(self._end_cursor(), index, message)
        self._scroll_to_end()
        return index

    def _push(self, message: Message) -> int:
        self._messages.append(message)
        return len(self._messages) - 1

    def begin_reply(self, message: Message) -> None:
        """Start showing `message` as it streams (its records arrive through append_records)."""
        self.complete_render()
        index = self._push(message)
        self._reply_msg = index
        cursor = self._end_cursor()
        self._begin_reply_at(cursor, index)
        self._scroll_to_end()

    def _begin_reply_at(self, cursor: QTextCursor, index: int) -> None:
        self._header(cursor, index, self._messages[index])
        self._stream = ReplyStream(index, cursor.position(), colours=self._colours, show_ghosts=self._ghosts)
        self._positions[index] = self._stream.positions  # kept up to date by the stream

    def append_records(self, tokens: list[list], ghosts: list[list]) -> None:
        """New token and ghost records of the streaming reply (as the recorder made them)."""
        stream = self._stream
        if self._reply_msg < 0 or stream is None:
            return
        at_bottom = self._at_bottom()
        cursor = self._end_cursor()
        cursor.beginEditBlock()  # one layout pass per batch
        stream.append(cursor, tokens, ghosts)
        cursor.endEditBlock()
        self._schedule()  # rendered from the timer: this batch's frame only appends
        if at_bottom:
            self._scroll_to_end()

    def finish_reply(self) -> None:
        """Render what is still raw of the reply (its last block) as Markdown, plus the footer.

        The blocks finished while it streamed are already rendered and stay as they are. Each span
        is built in a detached document a slice at a time, then put in at once; `rendered` says
        when the last one is there.
        """
        index, stream = self._reply_msg, self._stream
        if index < 0 or stream is None:
            return
        self._reply_msg = -1
        message = self._messages[index]
        stream.finish(message.tokens or [], message.ghosts or [])
        self._schedule(now=True)  # a short tail is done in this first slice

    def _style(self) -> dict[str, Any]:
        return {"colours": self._colours, "show_ghosts": self._ghosts, "dark": self.is_dark(),
                "base_point_size": self.font().pointSizeF()}

    def _detached(self, parent: QWidget | None = None) -> QTextDocument:
        doc = QTextDocument(parent)
        doc.setDefaultFont(self.font())
        doc.setIndentWidth(self.document().indentWidth())
        return doc

    def _schedule(self, now: bool = False) -> None:
        """Start rendering the stream's next span when one is ready (one span at a time)."""
        stream = self._stream
        if stream is None or self._job is not None or self._rebuild is not None or not stream.ready():
            return
        self._job = _RenderJob(stream, stream.next_span(self._detached(), self._style()))
        if now:
            self._on_render_timer_timeout()
        if self._job is not None:
            self._render_timer.start()

    def render_pending(self) -> bool:
        return self._job is not None or self._rebuild is not None or (
            self._stream is not None and self._stream.finished)

    def complete_render(self) -> None:
        """Finish pending rendering now (before the document changes under it)."""
        self._complete_rebuild()
        while self._job is not None:
            job = self._job
            for _ in job.span.steps:
                pass
            self._apply(job)

    def _complete_rebuild(self) -> None:
        rebuild = self._rebuild
        if rebuild is not None:
            for _ in rebuild.steps:
                pass
            self._swap(rebuild)

    @Slot()
    def _on_render_timer_timeout(self) -> None:
        rebuild = self._rebuild
        if rebuild is not None:
            deadline = time.perf_counter() + REBUILD_SLICE_S
            for _ in rebuild.steps:
                if time.perf_counter() >= deadline:
                    return
            self._swap(rebuild)
            return
        job = self._job
        if job is None:
            self._render_timer.stop()
            return
        start = time.perf_counter()
        if not job.rendered:
            for _ in job.span.steps:
                if time.perf_counter() - start >= RENDER_SLICE_S:
                    return  # more next tick; the raw streamed text stays on screen meanwhile
            job.rendered = True
            if time.perf_counter() - start >= RENDER_SLICE_S / 2:
                return  # putting it in (and the layout) gets a tick of its own
        self._apply(job)

    def _apply(self, job: _RenderJob) -> None:
        self._job = None
        self._render_timer.stop()
        at_bottom = self._at_bottom()
        stream = job.stream
        index = stream.index
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        end = stream.apply(self.document(), job.span)
        if job.span.final:
            self._footer(end, footer_text(self._messages[index]), index)
        cursor.endEditBlock()
        if at_bottom:
            self._scroll_to_end()
        if job.span.final:
            self._stream = None
            self.rendered.emit()
        else:
            self._schedule()  # more blocks finished meanwhile, or the reply ended

    # --- inspection (tooltips, tests) ---------------------------------------------------------------

    def token_position(self, msg: int, token: int) -> int | None:
        return self._positions.get(msg, {}).get(token)

    def fates_in_document(self, msg: int | None = None) -> dict[str, int]:
        """Characters per fate code in the document (of message `msg`, or all)."""
        from ui.base.token_style import PROP_MSG

        counts: dict[str, int] = {}
        block = self.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                fmt = frag.charFormat()
                code = fmt.property(PROP_FATE)
                if code is not None and (msg is None or fmt.intProperty(PROP_MSG) == msg):
                    counts[str(code)] = counts.get(str(code), 0) + frag.length()
                it += 1
            block = block.next()
        return counts

    def format_at(self, pos: QPointF) -> QTextCharFormat | None:
        doc_pos = QPointF(pos.x() + self.horizontalScrollBar().value(), pos.y() + self.verticalScrollBar().value())
        hit = self.document().documentLayout().hitTest(doc_pos, Qt.HitTestAccuracy.ExactHit)
        if hit < 0:
            return None
        cursor = QTextCursor(self.document())
        cursor.setPosition(hit)
        cursor.movePosition(QTextCursor.MoveOperation.NextCharacter, QTextCursor.MoveMode.KeepAnchor)
        return cursor.charFormat()

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            fmt = self.format_at(QPointF(event.pos()))
            text = tooltip(fmt) if fmt is not None else ""
            if text:
                QToolTip.showText(event.globalPos(), text, self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)

    # --- helpers ---------------------------------------------------------------------------------

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return self._stick or bar.value() >= bar.maximum() - 4

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

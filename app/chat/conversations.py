"""Conversations on disk: one JSON file per conversation, plus a journal for the reply in progress.

Each assistant message keeps its statistics and its token fates in a compact form, so a reloaded
chat shows the same colours as when it was generated:

    tokens: [[text, fate code, step], ...]   (+ [p, q] for sampled runs)
    ghosts: [[position, text], ...]          rejected draft text, shown before token `position`

Crash safety: the conversation file is only ever replaced atomically (app.atomic), and while a
reply streams, each batch of tokens is first appended to `<id>.journal` (one JSON line per batch,
flushed before it is shown); the whole file is rewritten when the reply starts and ends, not while
it streams (two fsyncs of a long chat on the GUI thread every second showed as stutter).
Loading replays a leftover journal, so a crash or kill loses nothing that was on screen. A file
that cannot be read is moved aside (never deleted or overwritten) and reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from app import paths
from app.atomic import atomic_write_text
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

if TYPE_CHECKING:
    from app.engine.sampling import SamplingParams  # not at run time: it brings numpy to `specchat chats`

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FATE_CODES: dict[TokenFate, str] = {
    TokenFate.ACCEPTED: "a",
    TokenFate.CORRECTED: "c",
    TokenFate.BONUS: "b",
    TokenFate.TARGET: "t",
    TokenFate.PREDICTED: "p",
    TokenFate.MTP: "m",
}
CODE_FATES: dict[str, TokenFate] = {code: fate for fate, code in FATE_CODES.items()}
# A chat's own sampling preset: app.settings.SAMPLING_PRESETS (not imported: settings bring the engine).
CHAT_SAMPLING = ("recommended", "greedy", "custom")
SNAPSHOT_INTERVAL_S: float | None = None  # periodic rewrites while streaming: off (the journal suffices)

TokenRecord = list[Any]  # [text, code, step] or [text, code, step, p, q]
GhostRecord = list[Any]  # [position, text]


class ChatFormatError(ValueError):
    pass


@dataclass
class Message:
    role: str  # "user" | "assistant"
    content: str
    created: float = field(default_factory=time.time)
    status: str = "done"  # "generating" | "done" | "interrupted" (found unfinished at load) | "error"
    tokens: list[TokenRecord] | None = None
    ghosts: list[GhostRecord] | None = None
    stats: dict[str, Any] | None = None
    mode: str | None = None
    models: dict[str, str | None] | None = None
    error: str | None = None
    compare: dict[str, Any] | None = None  # the plain run and the verdict of a side-by-side run
    sampling: dict[str, Any] | None = None  # a reply's sampling: {"preset": ..., temperature, top_k, ...}
    rolling: list[list[float]] | None = None  # its rolling acceptance as shown live: [reply index, rate] per step
    system: str | None = None  # a reply's system prompt, as it was when the reply ran ("" for none)

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy of thousands of token records costs tens of ms.
        return {name: value for name in self.__dataclass_fields__ if (value := getattr(self, name)) is not None}

    @classmethod
    def from_json(cls, data: Any) -> Message:
        if not isinstance(data, dict) or data.get("role") not in ("user", "assistant", "system"):
            raise ChatFormatError(f"bad message: {str(data)[:80]}")
        known = {f for f in cls.__dataclass_fields__}
        msg = cls(**{k: v for k, v in data.items() if k in known})
        if not isinstance(msg.content, str):
            raise ChatFormatError("message content is not text")
        return msg

    def append_tokens(self, start: int, tokens: list[TokenRecord], ghosts: list[GhostRecord]) -> None:
        """Add records that begin at reply index `start`; ones already held are skipped (idempotent)."""
        held = self.tokens if self.tokens is not None else []
        self.tokens = held
        skip = len(held) - start
        if skip < 0:
            raise ChatFormatError(f"journal gap: tokens from {start}, have {len(held)}")
        for record in tokens[skip:]:
            held.append(record)
            self.content += record[0]
        have = {(g[0], g[1]) for g in self.ghosts or []}
        fresh = [g for g in ghosts if (g[0], g[1]) not in have]
        if fresh:
            self.ghosts = (self.ghosts or []) + fresh


@dataclass
class Conversation:
    id: str
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    messages: list[Message] = field(default_factory=list)
    system: str | None = None  # this chat's system prompt; None: the default from the settings
    overflow: str | None = None  # "drop": the user chose to leave out the oldest turns when it outgrows the context
    sampling: str | None = None  # this chat's sampling preset (CHAT_SAMPLING); None: the settings' default
    # A stub holds only what the chat list needs (from the store's index); ChatStore.ensure_loaded
    # reads the rest. A stub is never written (ChatStore.save refuses it).
    stub: bool = field(default=False, compare=False, repr=False)
    stub_count: int = field(default=0, compare=False, repr=False)
    # haystack()'s cache: (what it was built from, the text).
    _haystack: tuple[tuple[float, str, int], str] | None = field(default=None, init=False, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
        }
        if self.system is not None:
            data["system"] = self.system
        if self.overflow is not None:
            data["overflow"] = self.overflow
        if self.sampling is not None:
            data["sampling"] = self.sampling
        data["messages"] = [m.to_json() for m in self.messages]
        return data

    @classmethod
    def from_json(cls, data: Any) -> Conversation:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise ChatFormatError("not a conversation object")
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise ChatFormatError("messages is not a list")
        return cls(
            id=data["id"],
            title=str(data.get("title") or "New chat"),
            created=float(data.get("created", 0.0)),
            updated=float(data.get("updated", 0.0)),
            messages=[Message.from_json(m) for m in messages],
            system=data["system"] if isinstance(data.get("system"), str) else None,
            overflow="drop" if data.get("overflow") == "drop" else None,
            sampling=data["sampling"] if data.get("sampling") in CHAT_SAMPLING else None,  # unknown: the default
        )

    def copy(self) -> Conversation:
        """A deep copy through the file format (what a fork and an undo keep)."""
        return Conversation.from_json(json.loads(json.dumps(self.to_json())))

    def system_prompt(self, default: str = "") -> str:
        return self.system if self.system is not None else default

    def chat_messages(self, default_system: str = "") -> list[dict[str, str]]:
        """What the model sees: the system prompt, then strictly alternating user and assistant turns.

        A prompt whose reply failed or came back empty is left out with that reply (templates such
        as Gemma's and Mistral's reject two user turns in a row); the last prompt, whose reply is
        the one being generated, always stays. Adjacent user turns from older files are joined.
        """
        out: list[dict[str, str]] = []
        system = self.system_prompt(default_system).strip()
        if system:
            out.append({"role": "system", "content": system})
        msgs = self.messages
        for i, m in enumerate(msgs):
            if m.role == "assistant":
                if m.status != "error" and m.content:
                    out.append({"role": "assistant", "content": m.content})
                continue
            if m.role != "user":
                continue
            reply = msgs[i + 1] if i + 1 < len(msgs) else None
            failed = reply is not None and reply.role == "assistant" and (reply.status == "error" or not reply.content)
            if failed and i + 2 < len(msgs):
                continue
            if out and out[-1]["role"] == "user":
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + m.content}
            else:
                out.append({"role": "user", "content": m.content})
        return out

    def message_count(self) -> int:
        return self.stub_count if self.stub else len(self.messages)

    def haystack(self) -> str:
        """Title and text, case-folded for search; rebuilt only when the chat has changed."""
        key = (self.updated, self.title, len(self.messages))
        if self._haystack is None or self._haystack[0] != key:
            self._haystack = (key, "\n".join([self.title, *(m.content for m in self.messages)]).casefold())
        return self._haystack[1]

    def matches(self, words: Iterable[str]) -> bool:
        haystack = self.haystack()
        return all(w.casefold() in haystack for w in words)


def _stub(conv_id: str, entry: dict[str, Any]) -> Conversation:
    return Conversation(id=conv_id, title=str(entry.get("title") or "New chat"),
                        created=float(entry.get("created", 0.0)), updated=float(entry.get("updated", 0.0)),
                        stub=True, stub_count=int(entry.get("count", 0)))


def new_id() -> str:
    # Sortable by creation time, unique without coordination.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


def title_from(text: str, limit: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def sampling_record(preset: str, params: SamplingParams) -> dict[str, Any]:
    """What a reply stores of its sampling: the preset it came from and the values the engine used."""
    return {"preset": preset, **asdict(params)}


def token_record(event: TokenEvent) -> TokenRecord:
    record: TokenRecord = [event.text, FATE_CODES[shown_fate(event)], event.step]
    if event.p is not None or event.q is not None:
        record += [event.p, event.q]
    return record


def records_from_events(events: Iterable[Event]) -> tuple[list[TokenRecord], list[GhostRecord]]:
    tokens: list[TokenRecord] = []
    ghosts: list[GhostRecord] = []
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(token_record(event))
        elif isinstance(event, StepEvent) and event.rejected and event.emitted > event.accepted:
            # Ghosts sit right before the step's corrected token; a step cut at a stop has none.
            ghosts.append([event.position + event.accepted, event.rejected_text])
    return tokens, ghosts


UNSENT_FILE = "unsent-prompt.txt"  # beside the chats: a prompt that was queued or typed when the window closed


class ReadOnlyStoreError(RuntimeError):
    """A change was asked of a store opened read-only."""


class ChatStore:
    """All conversations of one profile, in memory and on disk.

    `read_only` (what `specchat chats` opens): nothing on disk is changed. A window may be writing to the same
    folder, and only the process holding the profile lock may clean up: a leftover `.tmp` can be that window's
    atomic save in progress, and a journal the reply it is streaming. Such a store reads the journal into memory
    (the reply so far is listed and exported) but neither saves, renames, deletes, sets aside nor writes the index.
    """

    def __init__(self, folder: Path | None = None, read_only: bool = False) -> None:
        self.folder = Path(folder) if folder else paths.chats_dir()
        self.read_only = read_only
        # Set by the window: a save or journal write that failed (disk full, read-only folder) is reported to it
        # instead of raised into a Qt slot; the chat stays in memory (and its journal, where that was written),
        # listed in `unsaved`, until retry_unsaved() or its next save succeeds.
        self.on_save_error: Callable[[Conversation, OSError], None] | None = None
        self.unsaved: set[str] = set()
        self.conversations: dict[str, Conversation] = {}
        self.problems: list[str] = []  # one sentence per file that needed rescue at load
        self._journals: dict[str, IO[str]] = {}

    # --- loading ------------------------------------------------------------------------------

    def load_all(self, lazy: bool = False) -> list[Conversation]:
        """Read every conversation. `lazy` (the window): a chat whose file is unchanged since the
        index saw it comes as a stub (title, times, message count) and is read when opened or first
        searched; parsing every token record of every chat made start-up wait on the whole history."""
        self.conversations.clear()
        self.problems.clear()
        if not self.folder.is_dir():
            return []
        for stale in () if self.read_only else self.folder.glob(".*.tmp"):  # a write killed before its rename
            with contextlib.suppress(OSError):
                stale.unlink()
        index = self._read_index() if lazy else {}
        fresh: dict[str, dict[str, Any]] = {}
        for path in sorted(self.folder.glob("*.json")):
            entry = index.get(path.stem)
            stat = path.stat()
            if (entry is not None and entry.get("stamp") == [stat.st_mtime_ns, stat.st_size]
                    and not self._journal_path(path.stem).exists()):
                self.conversations[path.stem] = _stub(path.stem, entry)
                fresh[path.stem] = entry
                continue
            conv = self._read(path)
            if conv is not None:
                self.conversations[conv.id] = conv
                fresh[conv.id] = self._index_entry(conv)
        if lazy and fresh != index and not self.read_only:
            self._write_index(fresh)
        return self.sorted()

    def ensure_loaded(self, conv: Conversation) -> Conversation:
        """The whole conversation (a stub is read from its file now, in place)."""
        if not conv.stub:
            return conv
        full = self._read(self._path(conv.id))
        if full is None:  # unreadable now: set aside and reported; show it empty rather than fail
            conv.stub, conv.messages = False, []
            return conv
        for name in Conversation.__dataclass_fields__:
            setattr(conv, name, getattr(full, name))
        conv.stub = False
        return conv

    def _read(self, path: Path) -> Conversation | None:
        try:
            conv = Conversation.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            self._set_aside(path, exc)
            return None
        if conv.id != path.stem:
            conv.id = path.stem  # the file name is the identity: never overwrite another chat
        if self._recover(conv) and not self.read_only:
            self.save(conv)
        return conv

    # --- the index: what the chat list needs, without parsing every chat --------------------------

    def _index_path(self) -> Path:
        return self.folder / "chats.idx"

    def _read_index(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self._index_path().read_text(encoding="utf-8"))
            return data["chats"] if data.get("version") == FORMAT_VERSION and isinstance(data["chats"], dict) else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}  # rebuilt from the files

    def _write_index(self, entries: dict[str, dict[str, Any]]) -> None:
        with contextlib.suppress(OSError):  # only a cache: the files are the truth
            atomic_write_text(self._index_path(), json.dumps({"version": FORMAT_VERSION, "chats": entries},
                                                             ensure_ascii=False))

    def _index_entry(self, conv: Conversation) -> dict[str, Any]:
        path = self._path(conv.id)
        try:
            stat = path.stat()
            stamp = [stat.st_mtime_ns, stat.st_size]
        except OSError:
            stamp = []
        return {"title": conv.title, "created": conv.created, "updated": conv.updated,
                "count": len(conv.messages), "stamp": stamp}

    def _update_index(self, conv: Conversation | None, removed: str = "") -> None:
        if not self._index_path().exists():
            return  # a store that never loaded lazily keeps no index
        entries = self._read_index()
        if conv is not None:
            entries[conv.id] = self._index_entry(conv)
        entries.pop(removed, None)
        self._write_index(entries)

    def _set_aside(self, path: Path, exc: Exception) -> None:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        if self.read_only:
            where = "it was left in place (read-only: the window sets it aside when it next starts)"
        else:
            try:
                path.replace(aside)
                where = f"it was moved to {aside.name}"
            except OSError:
                where = "it was left in place"
        message = f"Conversation file {path.name} could not be read ({exc}); {where}."
        log.warning(message)
        self.problems.append(message)

    def _recover(self, conv: Conversation) -> bool:
        """Replay a journal left by a killed session; mark replies that never finished. Read-only, the reply
        in progress is read as far as its journal goes and stays "generating": its window may still be
        writing it."""
        changed = False
        journal = self._journal_path(conv.id)
        if journal.exists():
            for number, line in enumerate(journal.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                try:
                    entry = json.loads(line)
                    msg = conv.messages[entry["m"]]
                    msg.append_tokens(entry["i"], entry["t"], entry.get("g", []))
                    changed = True
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    # The last line may be cut short by the kill; anything before it was complete.
                    log.info("journal %s line %d skipped: %s", journal.name, number, exc)
        for msg in () if self.read_only else conv.messages:
            if msg.status == "generating":
                msg.status = "interrupted"
                changed = True
        return changed

    def sorted(self) -> list[Conversation]:
        return sorted(self.conversations.values(), key=lambda c: c.updated, reverse=True)

    # --- changes --------------------------------------------------------------------------------

    def new(self) -> Conversation:
        conv = Conversation(id=new_id())
        self.conversations[conv.id] = conv
        return conv

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.folder} was opened read-only; cannot {what}")

    def save(self, conv: Conversation) -> None:
        self._writable(f"save conversation {conv.id}")
        if conv.stub:
            raise RuntimeError(f"conversation {conv.id} was not loaded; saving it would empty its file")
        conv.updated = time.time()
        self.conversations[conv.id] = conv
        try:
            atomic_write_text(self._path(conv.id), json.dumps(conv.to_json(), ensure_ascii=False))
        except OSError as exc:
            self._failed(conv, exc)  # the journal stays: it holds what the file does not
            return
        self.unsaved.discard(conv.id)
        # Everything journaled is now in the file: start the journal afresh.
        self._close_journal(conv.id, remove=True)
        if not conv.messages or conv.messages[-1].status != "generating":
            self._update_index(conv)  # not at a reply's start: the end follows soon

    def rename(self, conv: Conversation, title: str) -> None:
        self.ensure_loaded(conv)
        conv.title = title.strip() or conv.title
        self.save(conv)

    def truncate(self, conv: Conversation, index: int) -> list[Message]:
        """Drop message `index` and everything after it (edit and resend, regenerate); saved."""
        removed = conv.messages[index:]
        del conv.messages[index:]
        self.save(conv)
        return removed

    def delete_message(self, conv: Conversation, index: int) -> None:
        """Delete one message; deleting a prompt deletes its reply too, so turns keep alternating."""
        end = index + 1
        if conv.messages[index].role == "user" and end < len(conv.messages) and conv.messages[end].role == "assistant":
            end += 1
        del conv.messages[index:end]
        self.save(conv)

    def fork(self, conv: Conversation, upto: int | None = None, title: str | None = None) -> Conversation:
        """A new chat holding a copy of `conv`'s first `upto` messages (the old branch, kept)."""
        copy = conv.copy()
        copy.id = new_id()
        while copy.id in self.conversations:
            copy.id = new_id()
        copy.messages = copy.messages[:upto]
        copy.title = title or conv.title
        copy.created = time.time()
        self.save(copy)
        return copy

    def find(self, prefix: str) -> Conversation:
        """The conversation whose id is or starts with `prefix` (as `chats export` takes it)."""
        if prefix in self.conversations:
            return self.ensure_loaded(self.conversations[prefix])
        hits = [c for c in self.conversations.values() if c.id.startswith(prefix)]
        if len(hits) != 1:
            what = "no conversation" if not hits else f"{len(hits)} conversations"
            raise KeyError(f"{what} with an id starting {prefix!r} in {self.folder} (see `specchat chats list`)")
        return self.ensure_loaded(hits[0])

    def delete(self, conv: Conversation) -> None:
        self._writable(f"delete conversation {conv.id}")
        self._close_journal(conv.id, remove=True)
        self.conversations.pop(conv.id, None)
        with contextlib.suppress(FileNotFoundError):
            self._path(conv.id).unlink()
        self._update_index(None, removed=conv.id)

    def search(self, query: str) -> list[Conversation]:
        words = query.split()
        if words:
            for conv in self.conversations.values():
                self.ensure_loaded(conv)  # the first search reads the chats not opened yet, once
        return [c for c in self.sorted() if c.matches(words)]

    # --- text not sent yet ----------------------------------------------------------------------

    def keep_unsent(self, text: str) -> None:
        """Keep the prompt the window could not send yet (queued during a load, or typed in the box) for its
        next start; "" forgets it."""
        self._writable("keep the unsent prompt")
        path = self.folder / UNSENT_FILE
        try:
            if text.strip():
                atomic_write_text(path, text)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.error("could not keep the unsent prompt in %s: %s", path, exc)

    def unsent(self) -> str:
        """The prompt kept by keep_unsent, or ""."""
        try:
            return (self.folder / UNSENT_FILE).read_text(encoding="utf-8")
        except OSError:
            return ""

    # --- the reply in progress ------------------------------------------------------------------

    def journal(self, conv: Conversation, msg_index: int, start: int, tokens: list[TokenRecord],
                ghosts: list[GhostRecord]) -> None:
        self._writable(f"journal conversation {conv.id}")
        try:
            handle = self._journals.get(conv.id)
            if handle is None:
                self.folder.mkdir(parents=True, exist_ok=True)  # a first save that failed never made it
                handle = open(self._journal_path(conv.id), "a", encoding="utf-8")  # noqa: SIM115 - kept open
                self._journals[conv.id] = handle
            line = json.dumps({"m": msg_index, "i": start, "t": tokens, "g": ghosts}, ensure_ascii=False)
            handle.write(line + "\n")
            handle.flush()  # in the OS's hands now: a killed process loses nothing
        except OSError as exc:
            self._failed(conv, exc)

    def sync_journal(self, conv: Conversation) -> None:
        """Make the reply's journal durable (a reply's end: a power cut after this loses nothing of it)."""
        handle = self._journals.get(conv.id)
        if handle is not None:
            try:
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as exc:
                self._failed(conv, exc)

    def retry_unsaved(self) -> bool:
        """Save again the chats whose last save failed; True when none is left unsaved."""
        for conv_id in list(self.unsaved):
            conv = self.conversations.get(conv_id)
            if conv is None:
                self.unsaved.discard(conv_id)
            else:
                self.save(conv)
        return not self.unsaved

    def _failed(self, conv: Conversation, exc: OSError) -> None:
        self.unsaved.add(conv.id)
        if self.on_save_error is None:
            raise exc
        log.error("saving conversation %s failed", conv.id, exc_info=exc)
        self.on_save_error(conv, exc)

    def close(self) -> None:
        for conv_id in list(self._journals):
            self._close_journal(conv_id, remove=False)

    def _close_journal(self, conv_id: str, remove: bool) -> None:
        handle = self._journals.pop(conv_id, None)
        if handle is not None:
            handle.close()
        if remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._journal_path(conv_id))

    def _path(self, conv_id: str) -> Path:
        return self.folder / f"{conv_id}.json"

    def _journal_path(self, conv_id: str) -> Path:
        return self.folder / f"{conv_id}.journal"


class ReplyRecorder:
    """Feeds one streaming reply into its message: journal first, save at the start and the end."""

    def __init__(self, store: ChatStore, conv: Conversation, message: Message,
                 interval_s: float | None = SNAPSHOT_INTERVAL_S) -> None:
        self.store, self.conv, self.message = store, conv, message
        self.index = conv.messages.index(message)
        self.interval_s = interval_s
        message.tokens = message.tokens or []
        message.ghosts = message.ghosts or []
        message.status = "generating"
        self._last_save = time.monotonic()
        store.save(conv)

    def add(self, events: Iterable[Event]) -> tuple[list[TokenRecord], list[GhostRecord]]:
        """Record a batch of events; returns the new token and ghost records (to display)."""
        start = len(self.message.tokens or [])
        tokens, ghosts = records_from_events(events)
        if tokens or ghosts:
            self.store.journal(self.conv, self.index, start, tokens, ghosts)
            self.message.append_tokens(start, tokens, ghosts)
            if self.interval_s is not None and time.monotonic() - self._last_save >= self.interval_s:
                self.snapshot()
        return tokens, ghosts

    def snapshot(self) -> None:
        self.store.save(self.conv)
        self._last_save = time.monotonic()

    def finish(self, finish: FinishEvent, extra: dict[str, Any] | None = None,
               rolling: Sequence[tuple[int, float]] = ()) -> None:
        msg = self.message
        shown = "".join(t[0] for t in msg.tokens or [])
        if finish.text != shown and finish.text.startswith(shown) and msg.tokens:
            msg.tokens[-1][0] += finish.text[len(shown):]  # a UTF-8 tail flushed at the end
        msg.content = "".join(t[0] for t in msg.tokens or [])
        msg.stats = stats_to_json(finish)
        msg.status = "done"
        if extra:
            msg.compare = extra
        msg.rolling = [[int(i), round(float(rate), 4)] for i, rate in rolling] or None
        self.store.sync_journal(self.conv)  # durable before the save that replaces it (which may fail)
        self.snapshot()

    def fail(self, error: str) -> None:
        self.message.status = "error" if not self.message.content else "interrupted"
        self.message.error = error
        self.snapshot()


def stats_to_json(finish: FinishEvent) -> dict[str, Any]:
    return asdict(finish.stats)


def number_pairs(data: Any) -> list[tuple[float, float]] | None:
    """A stored series of [number, number] pairs, or None when it is anything else (a hand-edited file must not
    crash): a reply's rolling acceptance, a comparison's pace."""
    if not isinstance(data, list):
        return None
    ok = all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p) for p in data)
    return [(a, b) for a, b in data] if ok else None


def rolling_from_json(data: Any) -> list[tuple[int, float]]:
    """A stored reply's rolling acceptance series ([] when absent or not a list of [index, rate] pairs)."""
    return [(int(i), float(rate)) for i, rate in number_pairs(data) or []]


def stats_from_json(data: dict[str, Any] | None) -> GenerationStats | None:
    """A stored message's statistics (None when absent or from an incompatible version)."""
    if not data:
        return None
    try:
        values = dict(data)
        values["governor"] = tuple(GovernorEvent(**g) for g in values.get("governor", ()))
        for key in ("per_position_acceptance", "accepted_length_histogram"):
            values[key] = tuple(values.get(key, ()))
        return GenerationStats(**values)
    except (TypeError, ValueError):
        return None

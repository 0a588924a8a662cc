"""Conversations on disk: atomic saves survive a writer killed mid-save, the journal survives a
killed reply, corrupt files are set aside (never lost), and rename/delete/search work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app import atomic
from app.chat.conversations import ChatStore, Message, ReplyRecorder, records_from_events
from app.engine.events import StepEvent, TokenEvent, TokenFate

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "data" / "chats"


def _run_until(script: str, marker: str, folder: Path) -> None:
    """Run `script` in a child process, SIGKILL it as soon as it prints `marker`."""
    env = {**os.environ, "SPECCHAT_HOME": str(folder.parent.parent), "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == marker:
                break
        else:
            pytest.fail(f"the writer never reached {marker!r}: {child.stderr.read() if child.stderr else ''}")
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_writer_killed_mid_save_leaves_previous_state(folder: Path) -> None:
    _run_until(
        """
        import sys, time
        import app.chat.conversations as chats
        from app.atomic import atomic_open
        from app.chat.conversations import ChatStore, Message

        store = ChatStore()
        conv = store.new()
        conv.id = "c1"
        conv.title = "version one"
        conv.messages.append(Message("user", "first prompt"))
        store.save(conv)

        def half_then_hang(path, text):  # the OS kills us in the middle of the new file
            with atomic_open(path) as handle:
                handle.write(text[: len(text) // 2])
                handle.flush()
                print("HALF", flush=True)
                time.sleep(600)

        chats.atomic_write_text = half_then_hang
        conv.title = "version two"
        conv.messages.append(Message("assistant", "x" * 100000))
        store.save(conv)
        """,
        "HALF",
        folder,
    )
    assert any(p.name.endswith(".tmp") for p in folder.iterdir())  # the half-written temporary file
    store = ChatStore()
    convs = store.load_all()
    assert [c.title for c in convs] == ["version one"]
    assert [m.content for m in convs[0].messages] == ["first prompt"]
    assert store.problems == []
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())  # cleaned up at load


def test_exception_mid_save_keeps_previous_file(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ChatStore()
    conv = store.new()
    conv.messages.append(Message("user", "keep me"))
    store.save(conv)
    before = (folder / f"{conv.id}.json").read_bytes()

    real = atomic.atomic_open

    def failing(path: Path, text: str) -> None:
        with real(path) as handle:
            handle.write(text[: len(text) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("app.chat.conversations.atomic_write_text", failing)
    conv.messages.append(Message("assistant", "lost"))
    with pytest.raises(OSError):
        store.save(conv)
    assert (folder / f"{conv.id}.json").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == [f"{conv.id}.json"]


def _events(n_steps: int) -> list[object]:
    """A made-up stream: each step accepts two drafted tokens, rejects two, and emits a correction."""
    out: list[object] = []
    index = 0
    for step in range(n_steps):
        out.append(StepEvent(step, index, 4, (1, 2, 3, 4), 2, (3, 4), "ghost", 3, 1.0, 2.0))
        for fate in (TokenFate.ACCEPTED, TokenFate.ACCEPTED, TokenFate.CORRECTED):
            out.append(TokenEvent(index, 100 + index, f"t{index} ", fate, step))
            index += 1
    return out


def test_killed_reply_keeps_every_token_already_shown(folder: Path) -> None:
    _run_until(
        """
        import time
        from app.chat.conversations import ChatStore, Message, ReplyRecorder
        from tests.test_chats_persistence import _events

        store = ChatStore()
        conv = store.new()
        conv.id = "live"
        conv.messages += [Message("user", "go"), Message("assistant", "")]
        recorder = ReplyRecorder(store, conv, conv.messages[1], interval_s=3600)  # no snapshot after the first
        events = _events(10)
        for i in range(0, len(events), 4):
            recorder.add(events[i: i + 4])  # journaled: this batch may now be shown
        print("SHOWN", flush=True)
        time.sleep(600)
        """,
        "SHOWN",
        folder,
    )
    store = ChatStore()
    [conv] = store.load_all()
    reply = conv.messages[1]
    tokens, ghosts = records_from_events(_events(10))
    assert reply.tokens == tokens
    assert reply.ghosts == ghosts
    assert reply.content == "".join(t[0] for t in tokens)
    assert reply.status == "interrupted"
    assert not (folder / "live.journal").exists()  # folded into the conversation file


def test_cut_journal_line_is_ignored(folder: Path) -> None:
    store = ChatStore()
    conv = store.new()
    conv.messages += [Message("user", "go"), Message("assistant", "")]
    recorder = ReplyRecorder(store, conv, conv.messages[1], interval_s=3600)
    recorder.add(_events(2))
    store.close()
    journal = folder / f"{conv.id}.journal"
    with journal.open("a", encoding="utf-8") as handle:
        handle.write('{"m": 1, "i": 6, "t": [["half')  # the kill hit mid-line
    [loaded] = ChatStore().load_all()
    assert len(loaded.messages[1].tokens or []) == 6


def test_recorder_saves_stats_and_resumes_cleanly(folder: Path) -> None:
    store = ChatStore()
    conv = store.new()
    conv.messages += [Message("user", "go"), Message("assistant", "")]
    recorder = ReplyRecorder(store, conv, conv.messages[1], interval_s=0)  # snapshot on every batch
    recorder.add(_events(3))
    data = json.loads((folder / f"{conv.id}.json").read_text())
    assert len(data["messages"][1]["tokens"]) == 9
    assert data["messages"][1]["status"] == "generating"


def test_corrupt_file_is_moved_aside_and_reported(folder: Path) -> None:
    store = ChatStore()
    good = store.new()
    good.messages.append(Message("user", "fine"))
    store.save(good)
    (folder / "broken.json").write_text('{"id": "broken", "messages": [', encoding="utf-8")
    store = ChatStore()
    convs = store.load_all()
    assert [c.id for c in convs] == [good.id]
    assert len(store.problems) == 1 and "broken.json" in store.problems[0]
    aside = [p for p in folder.iterdir() if p.name.startswith("broken.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_text(encoding="utf-8").startswith('{"id": "broken"')


def test_rename_delete_search(folder: Path) -> None:
    store = ChatStore()
    a, b = store.new(), store.new()
    a.messages.append(Message("user", "Sort a list in Python"))
    b.messages.append(Message("user", "Explain speculative decoding"))
    b.messages.append(Message("assistant", "A small draft model proposes tokens."))
    store.save(a)
    store.save(b)
    store.rename(a, "Sorting")
    assert [c.id for c in store.search("draft")] == [b.id]  # content
    assert [c.id for c in store.search("sorting")] == [a.id]  # title, any case
    assert store.search("python sort") == [a]  # every word must match
    store.delete(b)
    reloaded = ChatStore()
    assert [(c.id, c.title) for c in reloaded.load_all()] == [(a.id, "Sorting")]


def _journal_tokens(journal: Path) -> int:
    """Tokens in a journal's complete lines (the last one may be cut short by a kill)."""
    count = 0
    for line in journal.read_text(encoding="utf-8").splitlines():
        try:
            count += len(json.loads(line)["t"])
        except (ValueError, KeyError):
            pass
    return count


LONG_REPLY_PROMPT = ("Write a complete Python module for a library system: classes Book, Member, Loan and Library with "
                     "docstrings, type hints, every method implemented, and pytest tests for each method.")


@pytest.mark.gui
def test_cli_reads_a_streaming_window_without_touching_it(target_path: Path, tmp_path: Path) -> None:
    """`specchat chats list/export` while the window streams a reply: the CLI sees the reply so far, and leaves
    the window's journal, temporary files and index alone; after a SIGKILL the restarted store has the whole
    reply up to the kill. (Before the read-only store, `chats list` deleted the window's journal and `.tmp`.)
    The reply is a long module written by the 1.5B demo target: it outlasts the CLI's rounds by a wide margin."""
    from tests.gui_support import require_working_pyside

    require_working_pyside()
    home = tmp_path / "home"
    chats = home / "data" / "chats"
    env = {**os.environ, "SPECCHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # Greedy, and a request the target answers at length (over 700 tokens, more than a minute on a CPU): "count
    # to 2000" got 34 tokens and a "...", so on a quiet machine the reply ended before the CLI's rounds.
    window = subprocess.Popen([sys.executable, "-m", "ui.shell.entry", "gui", "-m", str(target_path), "--mode",
                               "lookup", "-n", "3000", "--temp", "0", "--prompt", LONG_REPLY_PROMPT],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "app.cli", "chats", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        deadline, rounds, exported = time.monotonic() + 300, 0, ""
        while rounds < 3:
            assert window.poll() is None, f"the window ended early: {window.stderr.read() if window.stderr else ''}"
            assert time.monotonic() < deadline, "the window never started streaming a reply"
            journals = list(chats.glob("*.journal"))
            if not journals or _journal_tokens(journals[0]) == 0:
                time.sleep(0.2)
                continue
            [journal] = journals
            before = journal.stat()
            index = chats / "chats.idx"
            index_before = index.stat().st_mtime_ns if index.exists() else None
            [row] = json.loads(cli("list", "--json"))
            exported = cli("export", row["id"], "--format", "json")
            assert journal.exists(), "the reply ended (or the CLI removed its journal) before the CLI's rounds"
            after = journal.stat()  # the CLI neither removed nor replaced the window's open journal
            assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev) and after.st_size >= before.st_size
            assert (index.stat().st_mtime_ns if index.exists() else None) == index_before
            rounds += 1
        reply = json.loads(exported)["messages"][-1]
        assert reply["role"] == "assistant" and reply["status"] == "generating" and reply["content"].strip()
        window.send_signal(signal.SIGKILL)
        window.wait(timeout=30)
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    journaled = _journal_tokens(journal)
    store = ChatStore(chats)
    [conv] = store.load_all()
    recovered = conv.messages[-1]
    assert recovered.status == "interrupted"
    assert len(recovered.tokens) >= journaled > 0
    assert recovered.content.startswith(reply["content"])  # what the CLI exported, and all written after it
    assert not journal.exists()  # the writer's store took the journal in and saved


def test_read_only_store_changes_nothing_on_disk(folder: Path) -> None:
    """What `specchat chats` opens: a half-made save, a journal, a corrupt file and the index stay as they are."""
    from app.chat.conversations import ReadOnlyStoreError

    writer = ChatStore()
    conv = writer.new()
    conv.messages += [Message("user", "hi"), Message("assistant", "", status="generating")]
    writer.save(conv)
    writer.journal(conv, 1, 0, [["Hel", 1, "target", 0, None, None], ["lo", 2, "target", 0, None, None]], [])
    (folder / ".half.json.tmp").write_text("{", encoding="utf-8")
    (folder / "broken.json").write_text("not json", encoding="utf-8")
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}

    reader = ChatStore(read_only=True)
    seen = {c.id: c for c in reader.load_all(lazy=True)}
    assert seen[conv.id].messages[1].content == "Hello"  # the journal read into memory ...
    assert seen[conv.id].messages[1].status == "generating"  # ... and the reply left to its writer
    assert any("broken.json" in p and "left in place" in p for p in reader.problems)
    with pytest.raises(ReadOnlyStoreError):
        reader.save(seen[conv.id])
    with pytest.raises(ReadOnlyStoreError):
        reader.delete(seen[conv.id])
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()} == before
    writer.close()

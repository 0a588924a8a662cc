"""Chat features of the Qt-free core: system prompts, strictly alternating history (a failed reply
never leaves two user turns in a row), edit/regenerate/delete/fork, continuing a reply, export as
Markdown and JSON, and the `specchat chats` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.chat.conversations import ChatStore, Conversation, Message
from app.chat.export import to_json, to_markdown
from app.models import chat_template

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _conv(*pairs: tuple[str, str, str]) -> Conversation:
    conv = Conversation(id="c1", title="t")
    for role, content, status in pairs:
        conv.messages.append(Message(role, content, status=status))
    return conv


def test_history_alternates_after_a_failed_or_empty_reply() -> None:
    conv = _conv(("user", "a", "done"), ("assistant", "A", "done"),
                 ("user", "b", "done"), ("assistant", "", "error"),       # failed at once
                 ("user", "c", "done"), ("assistant", "", "done"))        # being generated
    history = conv.chat_messages()
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[-1]["content"] == "c"  # the unanswered "b" went with its failed reply
    # Every template the app ships with accepts it (ChatML raises nothing; check alternation).
    roles = [m["role"] for m in history]
    assert all(x != y for x, y in zip(roles, roles[1:], strict=False))
    # A stopped reply that showed text is kept: the model sees what the user saw.
    conv.messages[3] = Message("assistant", "partial", status="interrupted")
    assert [m["content"] for m in conv.chat_messages()] == ["a", "A", "b", "partial", "c"]
    # Adjacent prompts from an older file are joined, never sent as two user turns.
    old = _conv(("user", "x", "done"), ("user", "y", "done"), ("assistant", "", "done"))
    assert old.chat_messages() == [{"role": "user", "content": "x\n\ny"}]


def test_system_prompt_default_and_per_chat(home: Path) -> None:
    conv = _conv(("user", "hi", "done"), ("assistant", "", "done"))
    assert conv.chat_messages() == [{"role": "user", "content": "hi"}]
    assert conv.chat_messages("Be brief.")[0] == {"role": "system", "content": "Be brief."}
    conv.system = "Answer in French."
    assert conv.chat_messages("Be brief.")[0]["content"] == "Answer in French."
    conv.system = ""  # the chat says: no system prompt, whatever the default
    assert conv.chat_messages("Be brief.")[0]["role"] == "user"
    store = ChatStore()
    conv.system = "Answer in French."
    store.save(conv)
    again = ChatStore()
    again.load_all()
    assert again.conversations["c1"].system == "Answer in French."


def test_truncate_delete_fork(home: Path) -> None:
    store = ChatStore()
    conv = store.new()
    conv.messages = [Message("user", "q1"), Message("assistant", "a1"), Message("user", "q2"),
                     Message("assistant", "a2")]
    store.save(conv)
    branch = store.fork(conv, title="t (earlier branch)")
    assert branch.id != conv.id and [m.content for m in branch.messages] == ["q1", "a1", "q2", "a2"]
    removed = store.truncate(conv, 2)  # edit q2 and resend from there
    assert [m.content for m in removed] == ["q2", "a2"] and len(conv.messages) == 2
    store.delete_message(conv, 0)  # a prompt goes with its reply
    assert conv.messages == []
    reloaded = ChatStore()
    reloaded.load_all()
    assert reloaded.conversations[conv.id].messages == []
    assert len(reloaded.conversations[branch.id].messages) == 4
    assert reloaded.find(branch.id[:-3]).id == branch.id
    with pytest.raises(KeyError, match="no conversation"):
        reloaded.find("nope")


def test_continue_renders_the_reply_open() -> None:
    messages = [{"role": "user", "content": "Count to ten"}, {"role": "assistant", "content": "1, 2, 3,"}]
    closed = chat_template.render(None, messages, add_generation_prompt=False)
    open_ = chat_template.render(None, messages, continue_final=True)
    assert closed.startswith(open_) and open_.endswith("1, 2, 3,") and len(closed) > len(open_)


def test_export_markdown_and_json() -> None:
    conv = _conv(("user", "What is 2+2?", "done"), ("assistant", "4", "done"))
    conv.messages[1].mode = "lookup"
    conv.messages[1].tokens = [["4", "t", 0]]
    conv.messages[1].stats = {"n_tokens": 1, "tokens_per_second": 12.5}
    md = to_markdown(conv, "Be brief.")
    assert md.startswith("# t\n") and "## System\n\nBe brief." in md
    assert md.index("## You") < md.index("What is 2+2?") < md.index("## Assistant") < md.index("\n4\n")
    assert "mode lookup" in md and "12.5 tok/s" in md
    data = json.loads(to_json(conv))
    assert data["system"] == "" and [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert "tokens" not in data["messages"][1] and data["messages"][1]["stats"]["n_tokens"] == 1


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, SPECCHAT_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


def test_chats_cli_list_and_export(home: Path, tmp_path: Path) -> None:
    store = ChatStore()
    conv = store.new()
    conv.title = "Sieve"
    conv.messages = [Message("user", "Write a sieve"), Message("assistant", "def sieve(n): ...")]
    store.save(conv)
    res = _cli("chats", "list", "--json", home=home)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows == [{"id": conv.id, "title": "Sieve", "updated": rows[0]["updated"], "messages": 2}]
    res = _cli("chats", "export", conv.id, "--format", "md", home=home)
    assert res.returncode == 0 and res.stdout.startswith("# Sieve") and "def sieve(n)" in res.stdout
    out = tmp_path / "c.json"
    res = _cli("chats", "export", conv.id[:10], "--format", "json", "-o", str(out), home=home)
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["messages"][0]["content"] == "Write a sieve"
    res = _cli("chats", "export", "missing", home=home)
    assert res.returncode != 0 and "no conversation with an id starting 'missing'" in res.stderr


def test_fit_messages_drops_the_oldest_turns_first() -> None:
    from app.chat.context_fit import fit_messages, reply_room

    def count(msgs: list[dict[str, str]]) -> int:  # one token per character, plus 4 per message
        return sum(len(m["content"]) + 4 for m in msgs)

    history = [{"role": "system", "content": "s" * 10}]
    for i in range(5):
        history += [{"role": "user", "content": f"q{i}" * 10}, {"role": "assistant", "content": f"a{i}" * 20}]
    history.append({"role": "user", "content": "new"})
    assert reply_room(4096, 1024) == 1024 and reply_room(1024, 1024) == 256
    fit = fit_messages(history, count, n_ctx=10_000, room=100)
    assert fit.dropped_turns == 0 and fit.messages == history and fit.fits
    fit = fit_messages(history, count, n_ctx=200, room=50)
    assert fit.fits and fit.prompt_tokens + 50 <= 200 and fit.dropped_turns >= 3
    assert fit.messages[0]["role"] == "system" and fit.messages[-1] == {"role": "user", "content": "new"}
    roles = [m["role"] for m in fit.messages[1:]]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:], strict=False))
    # Too long even alone: says so rather than sending something the context cannot hold.
    assert not fit_messages(history, count, n_ctx=30, room=10).fits


def test_a_trimmed_chat_keeps_its_start_until_more_must_go() -> None:
    """Left-out turns stay out while the rest fits, so the prompt starts as before and the model's cache of it
    serves; when more must go, the history drops to half of its space (llama.cpp's context shift)."""
    from app.chat.context_fit import fit_messages

    def count(msgs: list[dict[str, str]]) -> int:
        return sum(len(m["content"]) + 4 for m in msgs)

    history = [{"role": "system", "content": "s" * 10}]
    for i in range(8):
        history += [{"role": "user", "content": f"q{i}" * 10}, {"role": "assistant", "content": f"a{i}" * 20}]
    history.append({"role": "user", "content": "new"})
    n_ctx, room = 600, 50  # the whole history takes 14 + 8 * 68 + 7 = 565 of the 550 it may use
    first = fit_messages(history, count, n_ctx, room)
    assert first.fits and first.prompt_tokens <= (n_ctx - room) // 2 < count(
        history[:1] + history[1 + 2 * (first.dropped_turns - 1):])  # one turn fewer would be over half
    cuts = [first.dropped_turns]
    for i in range(8):  # each turn adds 68 tokens: the cut stays until the history outgrows n_ctx - room
        history[-1:] = [{"role": "user", "content": f"n{i}" * 10}, {"role": "assistant", "content": f"b{i}" * 20},
                        {"role": "user", "content": "new"}]
        fit = fit_messages(history, count, n_ctx, room, cuts[-1])
        assert fit.fits and fit.messages[-1] == {"role": "user", "content": "new"}
        if fit.dropped_turns == cuts[-1]:  # the same start: what the model read before is a prefix again
            assert fit.prompt_tokens + room <= n_ctx
        else:
            assert fit.dropped_turns > cuts[-1] and fit.prompt_tokens <= (n_ctx - room) // 2
        cuts.append(fit.dropped_turns)
    shifts = sum(a != b for a, b in zip(cuts, cuts[1:], strict=False))
    assert 1 <= shifts <= 2 and sorted(cuts) == cuts  # dropping the minimum each turn would start later every turn
    # A cut from before the chat lost turns (deleted) would leave almost nothing: it is made anew.
    shorter = history[:1] + history[1 + 2 * 8:]
    assert fit_messages(shorter, count, n_ctx, room, cuts[-1]) == fit_messages(shorter, count, n_ctx, room)
    assert fit_messages(shorter, count, n_ctx, room, cuts[-1]).prompt_tokens > (n_ctx - room) // 4


def test_lazy_load_reads_only_the_index_until_a_chat_is_opened(home: Path) -> None:
    store = ChatStore()
    ids = []
    for i in range(3):
        conv = store.new()
        conv.title = f"chat {i}"
        conv.messages = [Message("user", f"question {i}"), Message("assistant", f"answer {i} zebra" * (i + 1))]
        store.save(conv)
        ids.append(conv.id)
    ChatStore().load_all(lazy=True)  # no index yet: every file is read and the index written

    lazy = ChatStore()
    listed = lazy.load_all(lazy=True)
    assert all(c.stub for c in listed) and [c.message_count() for c in listed] == [2, 2, 2]
    assert [c.title for c in listed] == ["chat 2", "chat 1", "chat 0"]  # newest first, from the index
    stub = lazy.conversations[ids[1]]
    with pytest.raises(RuntimeError, match="not loaded"):
        lazy.save(stub)  # a stub must never overwrite its file with nothing
    lazy.rename(stub, "renamed")  # reads it first, so the messages survive
    assert not stub.stub and [m.content for m in stub.messages][0] == "question 1"
    again = ChatStore()
    again.load_all()
    assert again.conversations[ids[1]].title == "renamed" and len(again.conversations[ids[1]].messages) == 2

    # Another store's save keeps the index right; a file changed behind the index's back (an older
    # version, a hand edit) no longer matches its stamp and is read again.
    other = ChatStore()
    other.load_all()
    changed = other.conversations[ids[0]]
    changed.messages.append(Message("user", "okapi?"))
    other.save(changed)
    fourth = ChatStore()
    fourth.load_all(lazy=True)
    assert fourth.conversations[ids[0]].stub and fourth.conversations[ids[0]].message_count() == 3
    data = json.loads((other.folder / f"{ids[0]}.json").read_text())
    data["messages"].append(Message("assistant", "okapis are giraffids").to_json())
    (other.folder / f"{ids[0]}.json").write_text(json.dumps(data))
    third = ChatStore()
    third.load_all(lazy=True)
    assert not third.conversations[ids[0]].stub and third.conversations[ids[0]].message_count() == 4
    assert third.conversations[ids[2]].stub
    assert [c.id for c in third.search("okapi")] == [ids[0]] and [c.title for c in third.search("zebra")]
    third.delete(third.conversations[ids[2]])
    assert ids[2] not in {c.id for c in ChatStore().load_all(lazy=True)}


def test_chat_sampling_preset_round_trips(home: Path) -> None:
    """A chat's own sampling preset (and each reply's recorded sampling) survive save and load,
    through the index's stubs too; older files without it, or with an unknown preset, follow the default."""
    from app.chat.conversations import CHAT_SAMPLING, sampling_record
    from app.engine.sampling import SamplingParams
    from app.settings import SAMPLING_PRESETS

    assert CHAT_SAMPLING == SAMPLING_PRESETS
    store = ChatStore()
    greedy, plain = store.new(), store.new()
    greedy.sampling = "greedy"
    for conv in (greedy, plain):
        conv.messages = [Message("user", "hi"),
                         Message("assistant", "hello", sampling=sampling_record("greedy", SamplingParams(seed=3)))]
        store.save(conv)
    assert json.loads((store.folder / f"{greedy.id}.json").read_text())["sampling"] == "greedy"
    assert "sampling" not in json.loads((store.folder / f"{plain.id}.json").read_text())  # as older files
    ChatStore().load_all(lazy=True)  # writes the index

    lazy = ChatStore()
    lazy.load_all(lazy=True)
    stub = lazy.conversations[greedy.id]
    assert stub.stub  # from the index, not read yet
    loaded = lazy.ensure_loaded(stub)
    assert loaded.sampling == "greedy" and lazy.ensure_loaded(lazy.conversations[plain.id]).sampling is None
    record = loaded.messages[1].sampling
    assert record is not None and record["preset"] == "greedy" and record["temperature"] == 0.0
    assert record["seed"] == 3
    loaded.sampling = "custom"
    lazy.save(loaded)
    again = ChatStore()
    again.load_all(lazy=True)
    assert again.find(greedy.id).sampling == "custom"
    assert json.loads(to_json(loaded))["messages"][1]["sampling"]["preset"] == "greedy"  # exported

    data = json.loads((store.folder / f"{plain.id}.json").read_text())
    data["sampling"] = "creative"  # from a newer version, say
    (store.folder / f"{plain.id}.json").write_text(json.dumps(data))
    newer = ChatStore()
    newer.load_all(lazy=True)
    assert newer.find(plain.id).sampling is None

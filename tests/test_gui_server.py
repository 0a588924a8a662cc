"""The window's local server: Settings switch it on, the status bar shows its address, requests from OpenAI's client
run on the window's engine thread and land in the "Local server" chat with their token overlay; switched off, the
port closes. Real SmolLM2, offscreen Qt."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.chat.conversations import ChatStore
from app.settings import Settings
from tests.gui_support import fragments, gui_home, open_window

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def window(qapp: Any, smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = Settings(n_predict=8, n_ctx=1024, mode="lookup", sampling="greedy", server_enabled=True,
                        server_port=0)  # 0: any free port
    with gui_home(tmp_path_factory.mktemp("gui-server")):
        w = open_window(smol_path, None, settings)
        yield w
        w.close()


def _ask(url: str, out: list[Any], **kw: Any) -> threading.Thread:
    kw = {"max_tokens": 12, **kw}

    def run() -> None:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        try:
            out.append(client.chat.completions.create(model="specchat", temperature=0, **kw))
        except Exception as error:  # noqa: BLE001 - the test reports it
            out.append(error)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_request_is_served_by_the_window_and_shown_in_its_chat(window: Any, qtbot: Any) -> None:
    server = window.local_server
    assert server.thread is not None and server.address.startswith("http://127.0.0.1:")
    assert server.address in server.button.text() and server.button.isVisible()
    out: list[Any] = []
    with qtbot.waitSignal(server.requestServed, timeout=120_000):
        thread = _ask(server.address, out, messages=[{"role": "user", "content": "Name three fruits."}])
    thread.join(60)
    [reply] = out
    assert not isinstance(reply, Exception), reply
    text = reply.choices[0].message.content
    chat = window.server_chat.conversation()
    assert chat.title == "Local server" and chat.messages[-2].content == "Name three fruits."
    served = chat.messages[-1]
    assert served.role == "assistant" and served.content.startswith(text) and served.tokens
    assert "".join(t[0] for t in served.tokens) == served.content  # the overlay's records spell the reply
    assert served.stats["mode"] == "lookup"
    saved = {c.id: c for c in ChatStore(window.store.folder).load_all()}[chat.id]
    assert saved.messages[-1].content == served.content  # saved, as any chat
    window.show_server_chat()
    assert window.controller.conv is chat and "Name three fruits." in window.transcript.toPlainText()


def test_prediction_accepted_tokens_have_their_own_colour(window: Any, qtbot: Any) -> None:
    server = window.local_server
    source = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    messages = [{"role": "user", "content": "Repeat this code exactly:\n\n" + source}]
    out: list[Any] = []
    with qtbot.waitSignal(server.requestServed, timeout=120_000):
        thread = _ask(server.address, out, messages=messages, max_tokens=24)  # type: ignore[arg-type]
    thread.join(60)
    first = out[0].choices[0].message.content
    with qtbot.waitSignal(server.requestServed, timeout=120_000):
        thread = _ask(server.address, out, messages=messages, max_tokens=24,  # type: ignore[arg-type]
                      prediction={"type": "content", "content": first})
    thread.join(60)
    accepted = out[1].usage.completion_tokens_details.accepted_prediction_tokens
    served = window.server_chat.conversation().messages[-1]
    codes = [t[1] for t in served.tokens]
    assert accepted > 0 and codes.count("p") == accepted, (accepted, codes)
    assert served.rolling  # the stats panel's rolling acceptance, as for a chat's reply
    window.show_server_chat()
    from app.engine.events import TokenFate
    from app.palette import FATE_COLOURS
    from ui.base.token_style import PROP_FATE

    shown = [fmt.property(PROP_FATE) for _text, fmt, _pos in fragments(window.transcript)]
    assert "p" in shown  # the transcript paints them as predicted
    from PySide6.QtWidgets import QLabel

    labels = [label.text() for label in window.legend.findChildren(QLabel)]
    assert "Accepted from the prediction" in labels  # the legend names the colour
    assert FATE_COLOURS[TokenFate.PREDICTED] not in {FATE_COLOURS[f] for f in TokenFate if f is not TokenFate.PREDICTED}


def test_switched_off_the_port_closes(window: Any, qtbot: Any) -> None:
    address = window.local_server.address
    window.set_server_enabled(False)
    assert window.local_server.thread is None and not window.local_server.button.isVisible()
    client = openai.OpenAI(base_url=address, api_key="unused", max_retries=0, timeout=10)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
    window.set_server_enabled(True)  # back on, on a port of its own
    assert window.local_server.thread is not None


def test_the_server_chat_keeps_the_newest_requests(smol_session: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An editor resends whole files: the Local server chat keeps the newest KEEP_REQUESTS requests, saved."""
    import ui.chat.server_chat as server_chat
    from app.engine.events import FinishEvent
    from app.engine.session import GenParams
    from app.server.jobs import Job, JobSpec

    monkeypatch.setattr(server_chat, "KEEP_REQUESTS", 2)
    chat = server_chat.ServerChat(ChatStore(tmp_path))
    for n in range(3):
        messages = ({"role": "user", "content": f"Say {n}."},)
        events = list(smol_session.generate(smol_session.chat_prompt(list(messages)), GenParams("lookup", 4)))
        [finish] = [e for e in events if isinstance(e, FinishEvent)]
        conv = chat.record(Job(JobSpec("chat", GenParams(), messages=messages), lambda _item: None), finish, events)
    assert [m.content for m in conv.messages if m.role == "user"] == ["Say 1.", "Say 2."]
    [saved] = ChatStore(tmp_path).load_all()
    assert saved.title == "Local server" and len(saved.messages) == 4

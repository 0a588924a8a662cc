"""The window with an MTP target (issue 54): the mode box offers `mtp` only for a target with an MTP head, a reply
in that mode keeps the head's accepted tokens apart (record code "m", their own tint and legend entry)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel

from app.chat.conversations import FATE_CODES
from app.engine.drafters import CHOICES
from app.engine.events import TokenFate
from app.settings import Settings
from tests.gui_support import gui_home, open_window
from tests.tiny_gguf import write_qwen35

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def window(qapp: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("gui-mtp")
    model = write_qwen35(root / "qwen35-mtp.gguf", mtp_agree=0.95, text_tokens=True)
    settings = Settings(adaptive=False, n_predict=40, n_ctx=512, mode="mtp", sampling="greedy")
    with gui_home(root / "home"):
        w = open_window(model, None, settings)
        yield w
        w.close()


def test_an_mtp_reply_shows_the_heads_tokens(window: Any, qtbot: Any) -> None:
    box = window.mode_box
    assert box.model().item(CHOICES.index("mtp")).isEnabled()
    assert not box.model().item(CHOICES.index("draft")).isEnabled()  # no draft model loaded
    assert box.currentText() == "mtp"
    with qtbot.waitSignal(window.generationFinished, timeout=240_000) as blocker:
        assert window.submit("t3t4t5t6")
    assert blocker.args == [True], window.errors.text()
    reply = window.controller.conv.messages[-1]
    codes = [t[1] for t in reply.tokens]
    assert codes.count(FATE_CODES[TokenFate.MTP]) > 10, codes
    assert FATE_CODES[TokenFate.ACCEPTED] not in codes  # every accepted token here came from the head
    legend = [label.text() for label in window.legend.findChildren(QLabel)]
    assert "Accepted from the MTP head" in legend


def test_the_banner_says_why_a_chosen_mode_is_off(qapp: Any, tmp_path: Path) -> None:
    """Mode mtp chosen, a target without an MTP head loaded: replies fall back to lookup and the banner says so
    (never silently another mode); in mode mtp itself nothing is missing, so no banner."""
    from tests.tiny_gguf import write_lfm2
    from ui.shell.spec_banner import SpecState, banner_message

    assert banner_message(SpecState("mtp", False)) is None
    settings = Settings(adaptive=False, n_predict=8, n_ctx=256, mode="mtp", sampling="greedy")
    with gui_home(tmp_path / "home"):
        w = open_window(write_lfm2(tmp_path / "lfm2.gguf", n_vocab=16), None, settings)
        try:
            assert not w.mode_box.model().item(CHOICES.index("mtp")).isEnabled()
            assert w.mode_box.currentText() == "lookup"
            assert w.banner.isVisible() and "Mode mtp is off for these models" in w.banner.text()
            assert "no MTP head" in w.banner.text()
        finally:
            w.close()

"""The window's settings (ui.shell.settings_keeper), without a window: a change applies at once and is written
into the file by read, modify, write, so command-line overrides in the window's copy never reach it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app import settings as settings_mod
from app.settings import Settings
from ui.shell.settings_keeper import SettingsKeeper


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    return tmp_path


def test_a_change_is_kept_without_the_overrides(home: Path) -> None:
    settings_mod.save(Settings(n_ctx=2048))
    keeper = SettingsKeeper(Settings(n_ctx=512))  # --ctx 512 on the command line
    keeper.remember(compare=True)
    assert keeper.settings.compare and keeper.settings.n_ctx == 512
    saved = settings_mod.load()[0]
    assert saved.compare and saved.n_ctx == 2048


def test_nothing_is_written_when_saving_is_off(home: Path) -> None:
    keeper = SettingsKeeper(Settings(), save=False)
    keeper.remember(mode="none")
    keeper.remember_pair(Path("/m/target.gguf"), None)
    assert keeper.settings.mode == "none" and settings_mod.load()[0] == Settings()


def test_the_loaded_pair_and_a_pickers_choice_are_kept(home: Path) -> None:
    keeper = SettingsKeeper(Settings())
    keeper.remember_pair(Path("/m/target.gguf"), Path("/m/draft.gguf"))
    saved = settings_mod.load()[0]
    assert (saved.target_path, saved.draft_path) == ("/m/target.gguf", "/m/draft.gguf")
    assert keeper.settings.target_path is None  # the window's own copy is not the file's

    class Choice:
        def apply(self, settings: Settings) -> Settings:
            return replace(settings, n_gpu_layers=7)

    keeper.remember_choice(Choice())
    assert keeper.settings.n_gpu_layers == 7 and settings_mod.load()[0].n_gpu_layers == 7

"""The window's settings: a change applies at once and is written into the settings file (read, modified, written),
so command-line overrides (-m, --ctx ...) in the window's copy never reach the file. No Qt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from app import settings as settings_mod
from app.settings import Settings


class Choice(Protocol):
    """The model picker's choice (ui.picker): what it changes in the settings."""

    def apply(self, settings: Settings) -> Settings: ...


class SettingsKeeper:
    def __init__(self, settings: Settings, save: bool = True) -> None:
        self.settings = settings  # the window's own, overrides included
        self.save = save  # False: tests and scripted runs never write the file

    def remember(self, **change: Any) -> None:
        """Apply a setting now and keep it in the file."""
        if all(getattr(self.settings, k) == v for k, v in change.items()):
            return
        self.settings = replace(self.settings, **change)
        self._write(lambda saved: replace(saved, **change))

    def remember_choice(self, choice: Choice) -> None:
        self.settings = choice.apply(self.settings)
        self._write(choice.apply)

    def remember_pair(self, target: Path, draft: Path | None) -> None:
        """The pair that loaded opens again at the next start, also when it came from -m/-md."""
        pair = (str(target), str(draft) if draft else None)
        self._write(lambda saved: replace(saved, target_path=pair[0], draft_path=pair[1])
                    if (saved.target_path, saved.draft_path) != pair else saved)

    def _write(self, change: Callable[[Settings], Settings]) -> None:
        if not self.save:
            return
        saved, _warning = settings_mod.load()
        changed = change(saved)
        if changed != saved:
            settings_mod.save(changed)

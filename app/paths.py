"""Every path SpecChat reads or writes, built from platformdirs in one place.

`SPECCHAT_HOME` moves the whole profile (tests, portable installs); `SPECCHAT_MODELS_DIR` moves only
the models folder (a big disk elsewhere). Nothing else in the code base builds profile paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "specchat"


def _home() -> Path | None:
    value = os.environ.get("SPECCHAT_HOME")
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def log_dir() -> Path:
    home = _home()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


def log_file() -> Path:
    return log_dir() / "specchat.log"


def models_dir() -> Path:
    value = os.environ.get("SPECCHAT_MODELS_DIR")
    return Path(value).expanduser() if value else data_dir() / "models"


def chats_dir() -> Path:
    return data_dir() / "chats"


def settings_file() -> Path:
    return config_dir() / "settings.json"

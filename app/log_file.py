"""The rotating log file: what went wrong, with tracebacks, where a menu launch (no terminal) can find it.

The window writes INFO and above here (the worker logs failures with `exc_info`); the terminal keeps only what
it showed before (errors, or everything with -v). Three files of 1 MiB at most: enough for days of use.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from app import paths

MAX_BYTES = 1 << 20
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"


def install(level: int = logging.INFO) -> Path | None:
    """Add the log file to the root logger (once); its path, or None when the folder cannot be written (said
    once on stderr: logging then goes on to the terminal only)."""
    installed = current()
    if installed is not None:
        return installed
    root = logging.getLogger()
    path = paths.log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                                                       encoding="utf-8", delay=True)
    except OSError as exc:
        print(f"specchat: warning: no log file in {path.parent} ({exc.strerror or exc})", file=sys.stderr)
        return None
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(FORMAT))
    # The terminal's handlers keep the threshold the root had (basicConfig's ERROR, or INFO with -v).
    for other in root.handlers:
        if other.level == logging.NOTSET:
            other.setLevel(root.level)
    root.addHandler(handler)
    root.setLevel(min(root.level, level))
    return path


def current() -> Path | None:
    """The log file in use, if one was installed."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.handlers.RotatingFileHandler):
            return Path(handler.baseFilename)
    return None

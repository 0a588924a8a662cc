"""Minimal fixtures for the real model files (the lead's conftest may replace this one).

The files are looked up in `SPECCHAT_TEST_MODELS`, else in the app's models folder; a missing file
skips the tests that need it, naming what to set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app import paths

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _model(name: str) -> Path:
    folder = Path(os.environ.get("SPECCHAT_TEST_MODELS") or paths.models_dir())
    path = folder / name
    if not path.is_file():
        pytest.skip(f"{name} not found in {folder}; set SPECCHAT_TEST_MODELS to the folder holding it")
    return path


@pytest.fixture(scope="session")
def target_path() -> Path:
    return _model(TARGET)


@pytest.fixture(scope="session")
def draft_path() -> Path:
    return _model(DRAFT)


@pytest.fixture(scope="session")
def smol_path() -> Path:
    return _model(SMOL)

"""Shared fixtures: real model files and one loaded demo pair for the engine tests.

Models are looked up in `SPECCHAT_TEST_MODELS`, else in the app's models folder. A missing file
skips the tests that need it locally, and fails them where `SPECCHAT_REQUIRE_MODELS` is set (CI,
`bootstrap.py test`), so a broken download can never pass as a green run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app import paths  # noqa: E402

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"  # sliding-window attention (window 512)


# Taken once, at start-up: GUI tests point SPECCHAT_HOME at a temporary home while they run, and a
# session fixture first requested inside one must still find the real models.
MODELS_FOLDER = Path(os.environ.get("SPECCHAT_TEST_MODELS") or paths.models_dir())


def _model(name: str) -> Path:
    folder = MODELS_FOLDER
    path = folder / name
    if not path.is_file():
        message = f"{name} not found in {folder}; run `specchat models fetch-demo --with-smollm2` " \
                  "or set SPECCHAT_TEST_MODELS to the folder holding it"
        if os.environ.get("SPECCHAT_REQUIRE_MODELS"):
            pytest.fail(message)
        pytest.skip(message)
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


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _model(GEMMA)


@pytest.fixture(scope="session")
def demo_session(target_path: Path, draft_path: Path) -> Iterator[object]:
    """The real demo pair, loaded once for all engine tests (used from the test thread only)."""
    from app.engine.pair_config import PairConfig
    from app.engine.session import SpecSession

    session = SpecSession(PairConfig(target_path, draft_path, n_ctx=2048, n_threads=2))
    yield session
    session.close()


@pytest.fixture(scope="session")
def strict_session(target_path: Path, draft_path: Path) -> Iterator[object]:
    """The demo pair loaded as `--strict` does: no CPU weight repacking."""
    from app.engine.pair_config import PairConfig
    from app.engine.session import SpecSession

    session = SpecSession(PairConfig(target_path, draft_path, n_ctx=2048, n_threads=2, repack=False))
    yield session
    session.close()


@pytest.fixture(scope="session")
def smol_session(smol_path: Path) -> Iterator[object]:
    from app.engine.pair_config import PairConfig
    from app.engine.session import SpecSession

    session = SpecSession(PairConfig(smol_path, None, n_ctx=512, n_threads=2))
    yield session
    session.close()

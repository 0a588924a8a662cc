"""What to load for a pair: the files, offload and context settings. Read by the session that loads
it and, one layer down in import order, by the memory plan that checks it fits first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class PairConfig:
    target: Path
    draft: Path | None = None
    n_gpu_layers: int = -1
    n_gpu_layers_draft: int = -1
    n_ctx: int = 4096
    n_ctx_draft: int | None = None  # None: same as the target
    n_threads: int = 0
    # The draft's own CPU threads (llama.cpp's -td); None: as the target's. On a GPU each context still runs its
    # embedding lookup on the CPU, and a small draft's step is short enough for its thread hand-offs to show.
    n_threads_draft: int | None = None
    n_batch: int = 512
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    repack: bool = True  # see ModelConfig.repack: llama.cpp's default; off (strict) keeps verify batches bit-exact
    force: bool = False  # load even when the memory prediction says the pair will not fit
    # llama.cpp RPC servers ("HOST:PORT") whose devices join the local ones for the target; the draft
    # stays on this machine (its steps are many and small: a network round trip each would eat the gain).
    rpc: tuple[str, ...] = ()
    # Host memory for the target's caches of earlier prompts (app/engine/prompt_cache): going back to a chat
    # then skips processing its history again. -1: 1 GiB or a sixteenth of the RAM, whichever is less (none over
    # RPC, where a copy would cross the network); 0: none.
    prompt_cache_mb: int = -1

"""The one place that imports `llama_cpp` (checked by import-linter): models, contexts, batches,
logits and tokenizer (`core`); devices, build capabilities and llama.cpp's buffer report (`devices`)."""

from app.llama_backend.core import (
    CacheSnapshot,
    ContextConfig,
    ContextFullError,
    LlamaContext,
    LlamaError,
    LlamaModel,
    LogSink,
    ModelConfig,
    add_log_sink,
    default_threads,
    ensure_backend,
    reference_prompt_lookup_tps,
    remove_log_sink,
    supports_gpu_offload,
    system_info,
)

__all__ = [
    "CacheSnapshot",
    "ContextConfig",
    "ContextFullError",
    "LlamaContext",
    "LlamaError",
    "LlamaModel",
    "LogSink",
    "ModelConfig",
    "add_log_sink",
    "default_threads",
    "ensure_backend",
    "reference_prompt_lookup_tps",
    "remove_log_sink",
    "supports_gpu_offload",
    "system_info",
]

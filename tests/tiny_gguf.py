"""Write tiny, valid-or-deliberately-broken GGUF files with the real `gguf.GGUFWriter`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

VOCAB = [f"tok{i}" for i in range(32)]


def write_tiny(
    path: Path,
    *,
    arch: str = "llama",
    tokens: Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
    drop: Iterable[str] = (),
    n_embd: int = 64,
    template: str | None = "{{ messages }}<|im_end|>",
    quantized: bool = False,
) -> Path:
    """A small GGUF with the keys llama.cpp needs; `extra` adds or overrides keys, `drop` removes them.

    `extra` values: bool, int (uint32), float, str, list (array), or (value, GGUFValueType).
    """
    tokens = list(tokens if tokens is not None else VOCAB)
    w = gguf.GGUFWriter(str(path), arch)
    kv: dict[str, Any] = {
        f"{arch}.block_count": 2,
        f"{arch}.context_length": 256,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        "general.name": "tiny test model",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * len(tokens),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
    }
    if template is not None:
        kv["tokenizer.chat_template"] = template
    kv.update(extra or {})
    for key, value in kv.items():
        if isinstance(value, tuple):
            w.add_key_value(key, value[0], value[1])
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for key in drop:
        w.kv_data[0].pop(key, None)
    w.add_tensor("token_embd.weight", np.ones((len(tokens), n_embd), dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float16))
    if quantized:  # raw Q8_0 blocks: 34 bytes per 32 values; the writer takes the byte shape
        blocks = np.zeros((8, n_embd // 32 * 34), dtype=np.uint8)
        w.add_tensor(
            "output.weight", blocks, raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

"""The numbers memory prediction needs from a GGUF, checked: layers, widths, heads, tensors by layer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from app.models.gguf_meta import GGUFInfo, TensorInfo


class PredictionError(ValueError):
    """The metadata or the settings cannot give a meaningful prediction; the message says why."""


_BLK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ShapeTensor:
    info: TensorInfo
    layer: int  # -1 input, n_layer output, else repeating layer
    is_matmul: bool


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    n_vocab: int
    n_ctx_train: int
    tied: bool
    token_embd: TensorInfo | None
    tensors: tuple[ShapeTensor, ...]

    @classmethod
    def from_info(cls, info: GGUFInfo) -> Shape:
        """The checked numbers of `info` (cached: the model picker predicts on every slider move)."""
        return _shape_of(info)

    @classmethod
    def _build(cls, info: GGUFInfo) -> Shape:
        where = f"{info.path}"
        n_layer, n_embd, n_head, n_head_kv = info.n_layer, info.n_embd, info.n_head, info.n_head_kv
        # A recurrent model without attention (Mamba, RWKV): a state per sequence, no KV cache to size.
        attention_free = n_head <= 0 and f"{info.architecture}.ssm.state_size" in info.metadata
        if attention_free:
            n_head = n_head_kv = 0
        elif n_head <= 0:
            raise PredictionError(
                f"{where}: metadata gives {n_head} attention heads; the KV cache and the "
                "attention buffers cannot be sized; the file is not a usable chat model"
            )
        if not attention_free and not 0 < n_head_kv <= n_head:
            raise PredictionError(
                f"{where}: {n_head_kv} KV heads for {n_head} attention heads is impossible; "
                "the file's metadata is corrupt"
            )
        if not attention_free and (info.head_dim_k <= 0 or info.head_dim_v <= 0):
            raise PredictionError(
                f"{where}: head size {info.head_dim_k}/{info.head_dim_v} is not positive; "
                "the file's metadata is corrupt"
            )
        if info.vocab_size <= 0:
            raise PredictionError(f"{where}: the vocabulary is empty")
        tensors: list[ShapeTensor] = []
        max_blk = -1
        for t in info.tensors:
            if t.n_bytes < 0 or any(d <= 0 for d in t.shape):
                raise PredictionError(f"{where}: tensor {t.name} has shape {t.shape}; the file is corrupt")
            m = _BLK.match(t.name)
            if m:
                layer = int(m.group(1))
                max_blk = max(max_blk, layer)
                if layer >= n_layer:
                    raise PredictionError(
                        f"{where}: tensor {t.name} lies beyond the {n_layer} layers the "
                        "metadata declares; the file is corrupt"
                    )
            elif t.name.startswith(("output.", "output_norm.")):
                layer = n_layer
            else:
                layer = -1
            matmul = (
                len(t.shape) >= 2
                and t.name.endswith(".weight")
                and "norm" not in t.name
                and t.name != "token_embd.weight"
            )
            tensors.append(ShapeTensor(t, layer, matmul))
        if max_blk + 1 != n_layer:
            raise PredictionError(
                f"{where}: the metadata declares {n_layer} layers but the tensor table holds "
                f"{max_blk + 1}; the file is corrupt or truncated"
            )
        n_ff = _n_ff(info)
        token_embd = next((t for t in info.tensors if t.name == "token_embd.weight"), None)
        return cls(
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv * info.head_dim_k,
            n_head_kv * info.head_dim_v,
            info.vocab_size,
            info.context_length,
            info.tied_embeddings,
            token_embd,
            tuple(tensors),
        )


def _n_ff(info: GGUFInfo) -> int:
    value = info.metadata.get(f"{info.architecture}.feed_forward_length")
    if isinstance(value, list):
        value = max(value) if value else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    up = next((t for t in info.tensors if t.name == "blk.0.ffn_up.weight"), None)
    if up is not None and len(up.shape) >= 2:
        return int(up.shape[1])
    return 4 * info.n_embd  # no FFN width anywhere: the usual ratio, only sizes a small buffer


@lru_cache(maxsize=32)
def _shape_of(info: GGUFInfo) -> Shape:
    return Shape._build(info)

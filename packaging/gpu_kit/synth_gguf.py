"""Synthetic GGUFs with the demo pair's (and a 7B's) exact tensor names, shapes and types.

The metadata and tokenizer come from a carried header (`gguf_headers.py`); the weights are valid
blocks of random quants with finite fp16 scales chosen so activations stay of order one: real
numerics, real memory layout and real kernel times, nonsense text. `layers` scales a model down
(the dry run) by keeping the first layers' tensors; every other dimension stays.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, TokenType
from gguf_headers import Header, add_fields


@dataclass(frozen=True)
class Config:
    """What sizes a qwen2 model: its published configuration."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    tied: bool = False  # no output.weight: the output layer reads token_embd

    @property
    def n_embd_kv(self) -> int:
        return self.n_embd // self.n_head * self.n_head_kv


# Qwen2.5-Coder-7B-Instruct's config.json: a separate output matrix and a vocabulary padded to 152,064.
SEVEN_B = Config(n_layer=28, n_embd=3584, n_ff=18944, n_head=28, n_head_kv=4, n_vocab=152064)
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")
FORMAT = 4  # bump when the bytes a spec gives change: cached files are rewritten


def config_of(header: Header) -> Config:
    arch = header.arch
    names = {t[0] for t in header.tensors}
    return Config(
        n_layer=int(header.value(f"{arch}.block_count")),
        n_embd=int(header.value(f"{arch}.embedding_length")),
        n_ff=int(header.value(f"{arch}.feed_forward_length")),
        n_head=int(header.value(f"{arch}.attention.head_count")),
        n_head_kv=int(header.value(f"{arch}.attention.head_count_kv")),
        n_vocab=len(header.value("tokenizer.ggml.tokens")),
        tied="output.weight" not in names,
    )


def dims_for(role: str, c: Config) -> list[int]:
    """ggml dims (ne0 first) of a qwen2 tensor; `role` is the name without `blk.N.`."""
    kv = c.n_embd_kv
    table = {
        "token_embd.weight": [c.n_embd, c.n_vocab],
        "output.weight": [c.n_embd, c.n_vocab],
        "output_norm.weight": [c.n_embd],
        "attn_norm.weight": [c.n_embd],
        "ffn_norm.weight": [c.n_embd],
        "attn_q.weight": [c.n_embd, c.n_embd],
        "attn_q.bias": [c.n_embd],
        "attn_k.weight": [c.n_embd, kv],
        "attn_k.bias": [kv],
        "attn_v.weight": [c.n_embd, kv],
        "attn_v.bias": [kv],
        "attn_output.weight": [c.n_embd, c.n_embd],
        "ffn_gate.weight": [c.n_embd, c.n_ff],
        "ffn_up.weight": [c.n_embd, c.n_ff],
        "ffn_down.weight": [c.n_ff, c.n_embd],
    }
    if role not in table:
        raise ValueError(f"synth_gguf: no shape rule for tensor role {role!r}")
    return table[role]


@dataclass(frozen=True)
class Spec:
    """A synthetic model: the header it copies, its configuration and its tensor table."""

    name: str
    header: Header
    config: Config
    tensors: list[tuple[str, list[int], str]]
    overrides: dict[str, object]
    # Layers from this one on add almost nothing to the residual stream (their output projections'
    # scales x QUIET): the model then writes what its first layers write, so a copy cut to those
    # layers is a cheap draft that agrees with it (an agreeing pair for the governor at GPU speed).
    quiet_from: int | None = None


def spec_from(header: Header, name: str, config: Config | None = None, layers: int | None = None,
              quiet_from: int | None = None) -> Spec:
    """The header's model re-dimensioned to `config` (default: its own) and cut to `layers` layers.

    Tensor types follow the source layer by layer (Q4_K_M's mix of Q4_K and Q6_K depends on the
    layer index only for a given layer count, so a 28-layer 7B takes the 28-layer 1.5B's pattern).
    """
    own = config_of(header)
    config = config or own
    if layers is not None:
        config = replace(config, n_layer=min(layers, config.n_layer))
    types: dict[tuple[int, str], str] = {}
    order: list[tuple[int, str]] = []
    for tname, dims, ttype in header.tensors:
        m = _BLK.match(tname)
        key = (int(m.group(1)), m.group(2)) if m else (-1, tname)
        if config is own and dims != dims_for(key[1], own):
            raise ValueError(f"synth_gguf: {tname} is {dims} in {header.name}, the rule says {dims_for(key[1], own)}")
        types[key] = ttype
        order.append(key)
    tensors = []
    for layer, role in order:
        if layer >= config.n_layer:
            continue
        if role == "output.weight" and config.tied:
            continue
        name_ = f"blk.{layer}.{role}" if layer >= 0 else role
        tensors.append((name_, dims_for(role, config), types[(layer, role)]))
    if not config.tied and not any(t[0] == "output.weight" for t in tensors):
        tensors.insert(0, ("output.weight", dims_for("output.weight", config), "Q6_K"))
    arch = header.arch
    overrides: dict[str, object] = {
        f"{arch}.block_count": config.n_layer,
        f"{arch}.embedding_length": config.n_embd,
        f"{arch}.feed_forward_length": config.n_ff,
        f"{arch}.attention.head_count": config.n_head,
        f"{arch}.attention.head_count_kv": config.n_head_kv,
        "general.name": f"synthetic {name} ({config.n_layer} layers, n_embd {config.n_embd})",
    }
    return Spec(name, header, config, tensors, overrides, quiet_from)


def demo_specs(target: Header, draft: Header, scale: dict[str, int] | None = None) -> dict[str, Spec]:
    """The three shapes: the demo target (1.5B), the demo draft (0.5B), a 7B target of the family."""
    scale = scale or {}
    return {
        "target-1.5b": spec_from(target, "target-1.5b", layers=scale.get("target-1.5b")),
        "draft-0.5b": spec_from(draft, "draft-0.5b", layers=scale.get("draft-0.5b")),
        "target-7b": spec_from(target, "target-7b", SEVEN_B, layers=scale.get("target-7b")),
    }


def agreeing_specs(draft: Header, scale: dict[str, int] | None = None) -> dict[str, Spec]:
    """A 0.5B-shaped target whose layers after the first AGREE_LAYERS are quiet, and its first
    AGREE_LAYERS layers as the draft: the same bytes where they share a tensor, so they agree."""
    scale = scale or {}
    return {
        "agree-target": spec_from(draft, "agree-target", layers=scale.get("agree-target"), quiet_from=AGREE_LAYERS),
        "agree-draft": spec_from(draft, "agree-draft", layers=AGREE_LAYERS),
    }


def _fields(spec: Spec) -> dict:
    fields = dict(spec.header.fields)
    for key, value in spec.overrides.items():
        old = fields[key]
        fields[key] = (value, old[1], old[2])
    tokens = list(fields["tokenizer.ggml.tokens"][0])
    if len(tokens) < spec.config.n_vocab:  # Qwen pads its embedding rows past the tokenizer
        types = list(fields["tokenizer.ggml.token_type"][0])
        for i in range(len(tokens), spec.config.n_vocab):
            tokens.append(f"[PAD{i}]")
            types.append(int(TokenType.UNUSED))
        fields["tokenizer.ggml.tokens"] = (tokens, GGUFValueType.ARRAY, GGUFValueType.STRING)
        fields["tokenizer.ggml.token_type"] = (types, GGUFValueType.ARRAY, GGUFValueType.INT32)
    return fields


# Byte offsets of the fp16 scales inside one block (ggml-common.h), and the typical size of
# |quant x sub-scale| so a weight comes out near 1/sqrt(n_in).
_SCALES: dict[str, tuple[tuple[int, ...], float]] = {
    "Q4_0": ((0,), 4.0),
    "Q4_1": ((0, 2), 8.0),
    "Q5_0": ((0,), 8.0),
    "Q5_1": ((0, 2), 16.0),
    "Q8_0": ((0,), 64.0),
    "Q2_K": ((80, 82), 12.0),
    "Q3_K": ((108,), 64.0),
    "Q4_K": ((0, 2), 256.0),
    "Q5_K": ((0, 2), 512.0),
    "Q6_K": ((208,), 1024.0),
}
# Types whose blocks add a minimum (value = d*q + m for Q4_1/Q5_1, d*sc*q - dmin*mn for the K-quants): the
# second fp16 is set to this multiple of the first, so a weight's mean is zero on average. Drawn at random
# like d, a min gave every weight a mean as large as its spread, and activations grew with n_in at each
# layer (up to 90,000 in the dry 1.5B, past fp16's range: the likely cause of run 26's NaN 7B logits on CUDA).
_MIN_RATIO = {"Q4_1": -7.5, "Q5_1": -15.5, "Q2_K": 1.5, "Q4_K": 7.5, "Q5_K": 15.5}
# Output matrices 20x larger than order one: logits spread over ~30 instead of ~1.5, so the models
# are as sure of their top token as real ones (a drafter's p-min cut would stop every draft otherwise).
OUTPUT_GAIN = 20.0
QUIET = 0.002
AGREE_LAYERS = 2
_QUIET_ROLES = ("attn_output.weight", "ffn_down.weight")
_POOL_BYTES = 1 << 26  # random bytes reused at random block-aligned offsets: fast on any disk
_CHUNK_BLOCKS = 1 << 16


def n_bytes(dims: list[int], ttype: str) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ttype]]
    n = int(np.prod(dims))
    if n % block:
        raise ValueError(f"synth_gguf: {dims} values are not whole {ttype} blocks")
    return n // block * size


def write(spec: Spec, path: Path, seed: int = 0) -> Path:
    """Write the synthetic GGUF; returns `path`. Deterministic for a given seed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(path, spec.header.arch)
    add_fields(writer, _fields(spec))
    for tname, dims, ttype in spec.tensors:
        qtype = GGMLQuantizationType[ttype]
        writer.add_tensor_info(tname, list(reversed(dims)), np.dtype(np.float32), n_bytes(dims, ttype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    pool = np.random.default_rng(seed).integers(0, 256, _POOL_BYTES, dtype=np.uint8)
    fout = writer.fout[0]  # type: ignore[index]
    align = writer.data_alignment
    _pad(fout, align)
    for tname, dims, ttype in spec.tensors:
        # One generator per tensor name: two models holding a tensor of the same name, shape and type
        # hold the same bytes (the agreeing pair relies on it).
        rng = np.random.default_rng([seed, zlib.crc32(tname.encode())])
        m = _BLK.match(tname)
        quiet = (spec.quiet_from is not None and m is not None and int(m.group(1)) >= spec.quiet_from
                 and m.group(2) in _QUIET_ROLES)
        gain = QUIET if quiet else OUTPUT_GAIN if tname == "output.weight" else 1.0
        _write_tensor(fout, tname, dims, ttype, rng, pool, gain)
        _pad(fout, align)
    writer.close()
    path.with_suffix(".json").write_text(json.dumps(meta(spec, seed)))
    return path


def meta(spec: Spec, seed: int = 0) -> dict:
    """What identifies a written file's bytes (kept beside it, so a cached file is reused only if equal)."""
    return {"name": spec.name, "config": spec.config.__dict__, "tensors": len(spec.tensors), "seed": seed,
            "quiet_from": spec.quiet_from, "format": FORMAT}


def _pad(fout, align: int) -> None:  # type: ignore[no-untyped-def]
    extra = -fout.tell() % align
    if extra:
        fout.write(b"\0" * extra)


def _write_tensor(fout, name: str, dims: list[int], ttype: str, rng: np.random.Generator,  # type: ignore[no-untyped-def]
                  pool: np.ndarray, gain: float = 1.0) -> None:
    n = int(np.prod(dims))
    n_in = dims[0]
    if ttype in ("F32", "F16"):
        if name.endswith("norm.weight"):
            values = 1.0 + 0.05 * rng.standard_normal(n)
        else:  # biases
            values = 0.02 * rng.standard_normal(n)
        fout.write(values.astype(np.float32 if ttype == "F32" else np.float16).tobytes())
        return
    if ttype not in _SCALES:
        raise ValueError(f"synth_gguf: no block layout for {ttype} ({name})")
    offsets, typical = _SCALES[ttype]
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ttype]]
    blocks = n // block
    # Embedding rows are read as they are (order one); matrix weights ~ 1/sqrt(n_in) keep each
    # layer's output of order one, so 28 layers stay finite.
    base = gain * (1.0 if name == "token_embd.weight" else 1.0 / np.sqrt(n_in)) / typical
    per_chunk = _CHUNK_BLOCKS
    pool_blocks = len(pool) // size
    done = 0
    while done < blocks:
        count = min(per_chunk, blocks - done)
        start = int(rng.integers(0, max(pool_blocks - count, 1))) * size
        chunk = pool[start : start + count * size].copy()
        if len(chunk) < count * size:  # a tensor chunk larger than the pool: tile it
            chunk = np.resize(pool, count * size)
        rows = chunk.reshape(count, size)
        scales = base * rng.uniform(0.5, 1.5, (count, len(offsets)))
        if ttype in _MIN_RATIO:
            scales[:, 1] = _MIN_RATIO[ttype] * scales[:, 0]
        scales = scales.astype(np.float16)
        for j, off in enumerate(offsets):
            rows[:, off : off + 2] = np.ascontiguousarray(scales[:, j]).view(np.uint8).reshape(count, 2)
        fout.write(rows.tobytes())
        done += count

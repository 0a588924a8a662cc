"""GGUF metadata and tensor table, read without loading any weights.

`gguf.GGUFReader` builds numpy objects for every token and merge string (about 300k on Qwen2.5) and
takes ~10 s on the 1.5B file, far too slow for a model picker. This module walks the header itself
with `struct` over an mmap (string arrays are skipped by their length prefixes, never decoded) and
borrows only the format's constants from the `gguf` package. Results are cached by (path, mtime,
size). Every failure is a `GGUFError` naming the file, the failed check and what to do.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf.constants import GGUF_MAGIC

from app.models.gguf_parse import (
    ArrayRef,
    GGUFError,
    Header,
    TensorInfo,
    metadata_int,
    parse_header,
    quant_label,
    tensor_table,
)

__all__ = [
    "has_mtp_layers",
    "nextn_layers",
    "GGUFError",
    "GGUFInfo",
    "TensorInfo",
    "clear_cache",
    "read_gguf",
    "read_token_bytes",
    "read_token_types",
    "read_tokens",
]

# Sanity bounds: far above any real model, low enough to catch garbage before it reaches llama.cpp.
_MAX_LAYERS = 4096
_MAX_EMBD = 1 << 20
_MAX_CONTEXT = 1 << 27
_MAX_HEADS = 1 << 16
_MAX_VOCAB = 1 << 24

# tokenizer.ggml.model -> llama.cpp vocab type (llama-vocab.cpp); "gpt2" and "gemma4" are both BPE.
VOCAB_TYPES = {
    "no_vocab": "none",
    "none": "none",
    "llama": "spm",
    "gpt2": "bpe",
    "hybriddna": "bpe",
    "whitespace": "bpe",
    "gemma4": "bpe",
    "bert": "wpm",
    "t5": "ugm",
    "rwkv": "rwkv",
    "plamo2": "plamo2",
    "test": "test",
}
# llama.cpp's defaults when the file names no BOS/EOS or add_bos/add_eos (llama-vocab.cpp).
_DEFAULT_SPECIAL = {"spm": (1, 2), "bpe": (11, 11), "wpm": (101, None), "ugm": (None, 1), "plamo2": (1, 2)}
_DEFAULT_ADD = {"spm": (True, False), "wpm": (True, False), "ugm": (False, True)}
# BPE pre-tokenizers for which llama.cpp turns add_bos on by default.
_ADD_BOS_PRE = frozenset(
    "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano tekken chameleon".split()
)


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    file_size: int
    architecture: str
    name: str
    n_params: int
    file_type: str  # quantisation label, e.g. "Q4_K_M"
    context_length: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    vocab_size: int
    vocab_type: str  # llama.cpp's: "spm", "bpe", ...
    tokenizer_model: str
    tokenizer_pre: str | None
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None
    eog_ids: tuple[int, ...]  # from metadata only; llama.cpp adds a few by token text at load
    add_bos: bool
    add_eos: bool
    chat_template: str | None
    tokenizer_fingerprint: str
    tied_embeddings: bool
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    # Every scalar key and every small array, for callers that need more (memory prediction).
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def n_bytes_weights(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


@dataclass(frozen=True)
class _Parsed:
    info: GGUFInfo
    tokens: ArrayRef
    token_types: ArrayRef | None


_cache: OrderedDict[tuple[str, int, int], _Parsed] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 64


def read_gguf(path: str | os.PathLike[str]) -> GGUFInfo:
    """Metadata and tensor table of a GGUF file; raises GGUFError with a readable reason."""
    return _load(Path(path)).info


def read_tokens(path: str | os.PathLike[str]) -> list[str]:
    """Token strings by id (undecodable bytes become U+FFFD)."""
    return [b.decode("utf-8", errors="replace") for b in read_token_bytes(path)]


def read_token_bytes(path: str | os.PathLike[str]) -> list[bytes]:
    """Token strings as raw bytes: exact, which is what llama.cpp's strcmp compares."""
    parsed = _load(Path(path))
    raw = _read_region(parsed.info.path, parsed.tokens)
    out: list[bytes] = []
    unpack, off = struct.Struct("<Q").unpack_from, 0
    for _ in range(parsed.tokens.count):
        (n,) = unpack(raw, off)
        out.append(raw[off + 8 : off + 8 + n])
        off += 8 + n
    return out


def read_token_types(path: str | os.PathLike[str]) -> list[int] | None:
    """llama.cpp token types (1 normal, 3 control, 4 user-defined, 6 byte ...), or None if absent."""
    parsed = _load(Path(path))
    ref = parsed.token_types
    if ref is None or ref.item_fmt not in ("i", "I"):
        return None
    raw = _read_region(parsed.info.path, ref)
    return list(struct.unpack(f"<{ref.count}{ref.item_fmt}", raw))


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _read_region(path: Path, ref: ArrayRef) -> bytes:
    with open(path, "rb") as f:
        f.seek(ref.start)
        raw = f.read(ref.end - ref.start)
    if len(raw) != ref.end - ref.start:
        raise GGUFError(f"{path}: file changed or shrank while reading the vocabulary; re-download it")
    return raw


def _load(path: Path) -> _Parsed:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise GGUFError(f"{path}: no such file; check the path or download the model again") from None
    except OSError as e:
        raise GGUFError(f"{path}: cannot read the file ({e.strerror}); check its permissions") from None
    if path.is_dir():
        raise GGUFError(f"{path}: is a folder, not a GGUF file; pick the .gguf file inside it")
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)  # per alias: info.path is the caller's
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    try:
        parsed = _parse(path, st.st_size)
    except (ValueError, OverflowError, IndexError, KeyError, MemoryError) as e:
        # parse_header checks every bound it knows of; anything else is still a corrupt file, not a crash.
        raise GGUFError(f"{path}: corrupt GGUF header ({type(e).__name__}: {e}); download it again") from None
    with _cache_lock:
        _cache[key] = parsed
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return parsed


def _parse(path: Path, file_size: int) -> _Parsed:
    if file_size < 24:
        raise GGUFError(f"{path}: not a GGUF file (only {file_size} bytes); pick a .gguf model file")
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if struct.unpack_from("<I", buf, 0)[0] != GGUF_MAGIC:
                head = bytes(buf[:4])
                raise GGUFError(
                    f"{path}: not a GGUF file (starts with {head!r}, expected b'GGUF'); "
                    "pick a .gguf model file (safetensors/bin checkpoints must be converted first)"
                )
            header = parse_header(buf, path)
            # The raw, length-prefixed token list: hashing it needs no decoding at all.
            tokens = header.fields.get("tokenizer.ggml.tokens")
            token_blob = bytes(buf[tokens.start : tokens.end]) if isinstance(tokens, ArrayRef) else b""
    except OSError as e:
        raise GGUFError(f"{path}: cannot read the file ({e.strerror or e}); check its permissions") from None
    return _build(path, file_size, header, token_blob)


class _Keys:
    """Typed, bounded access to the key/values, raising GGUFError that names the key."""

    _REQUIRED = object()

    def __init__(self, path: Path, kv: dict[str, Any]) -> None:
        self.path, self.kv = path, kv

    def get(self, key: str, kind: type, default: Any = _REQUIRED) -> Any:
        if key not in self.kv:
            if default is self._REQUIRED:
                raise GGUFError(
                    f"{self.path}: missing required metadata key '{key}'; the file is incomplete or was "
                    "not written by a llama.cpp converter; download or convert it again"
                )
            return default
        value = self.kv[key]
        if isinstance(value, ArrayRef) and kind is not ArrayRef:
            # Per-layer arrays (e.g. head counts in OpenELM): the largest entry sizes the buffers.
            value = max(value.small) if value.small else None
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise GGUFError(
                f"{self.path}: metadata key '{key}' has the wrong type ({type(value).__name__}); "
                "the file is corrupt; download it again"
            )
        return value

    def bounded(self, key: str, low: int, high: int, default: Any = _REQUIRED) -> int:
        value: int = self.get(key, int, default)
        if not low <= value <= high:
            raise GGUFError(
                f"{self.path}: metadata '{key}' = {value:,} is outside any sane range "
                f"({low:,}..{high:,}); the file is corrupt; download it again"
            )
        return value


def _build(path: Path, file_size: int, header: Header, token_blob: bytes) -> _Parsed:
    k = _Keys(path, header.fields)
    arch = k.get("general.architecture", str)
    if arch == "clip":
        raise GGUFError(f"{path}: a vision projector (mmproj), not a language model; pick the main model")
    n_embd = k.bounded(f"{arch}.embedding_length", 1, _MAX_EMBD)
    n_head = k.bounded(f"{arch}.attention.head_count", 0, _MAX_HEADS, 0)
    hd_k = k.bounded(f"{arch}.attention.key_length", 0, _MAX_EMBD, n_embd // n_head if n_head else 0)

    tok_model = k.get("tokenizer.ggml.model", str)
    tokens: ArrayRef = k.get("tokenizer.ggml.tokens", ArrayRef)
    if tokens.item_fmt != "s":
        raise GGUFError(f"{path}: 'tokenizer.ggml.tokens' is not a list of strings; the file is corrupt")
    if not 1 <= tokens.count <= _MAX_VOCAB:
        raise GGUFError(f"{path}: absurd vocabulary size {tokens.count:,}; the file is corrupt")
    n_vocab = tokens.count
    vocab_type = VOCAB_TYPES.get(tok_model, tok_model)
    pre = k.get("tokenizer.ggml.pre", str, None)

    def special(key: str, default: int | None) -> int | None:
        value = k.get(f"tokenizer.ggml.{key}", int, default)
        # llama.cpp warns and keeps its default for an id outside the vocabulary; so do we.
        return value if value is None or 0 <= value < n_vocab else default

    d_bos, d_eos = _DEFAULT_SPECIAL.get(vocab_type, (None, None))
    bos, eos = special("bos_token_id", d_bos), special("eos_token_id", d_eos)
    eot, eom = special("eot_token_id", None), special("eom_token_id", None)
    d_add_bos, d_add_eos = _DEFAULT_ADD.get(vocab_type, (pre in _ADD_BOS_PRE, False))

    tensors = tensor_table(path, file_size, header)
    token_types = header.fields.get("tokenizer.ggml.token_type")
    info = GGUFInfo(
        path=path,
        file_size=file_size,
        architecture=arch,
        name=k.get("general.name", str, None) or path.stem,
        n_params=sum(math.prod(t.shape) for t in tensors),
        file_type=quant_label(header.fields, tensors),
        context_length=k.bounded(f"{arch}.context_length", 1, _MAX_CONTEXT),
        n_layer=k.bounded(f"{arch}.block_count", 1, _MAX_LAYERS),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=k.bounded(f"{arch}.attention.head_count_kv", 0, _MAX_HEADS, n_head),
        head_dim_k=hd_k,
        head_dim_v=k.bounded(f"{arch}.attention.value_length", 0, _MAX_EMBD, hd_k),
        vocab_size=n_vocab,
        vocab_type=vocab_type,
        tokenizer_model=tok_model,
        tokenizer_pre=pre,
        bos_id=bos,
        eos_id=eos,
        eot_id=eot,
        eom_id=eom,
        eog_ids=tuple(sorted({i for i in (eos, eot, eom) if i is not None})),
        add_bos=bool(k.get("tokenizer.ggml.add_bos_token", bool, d_add_bos)),
        add_eos=bool(k.get("tokenizer.ggml.add_eos_token", bool, d_add_eos)),
        chat_template=k.get("tokenizer.chat_template", str, None),
        tokenizer_fingerprint=hashlib.sha256(tok_model.encode() + b"\0" + token_blob).hexdigest()[:16],
        tied_embeddings=not any(t.name == "output.weight" for t in tensors),
        tensors=tensors,
        data_offset=header.data_offset,
        metadata={
            key: (v.small if isinstance(v, ArrayRef) else v)
            for key, v in header.fields.items()
            if not isinstance(v, ArrayRef) or v.small is not None
        },
    )
    return _Parsed(info, tokens, token_types if isinstance(token_types, ArrayRef) else None)


def nextn_layers(info: GGUFInfo) -> int:
    """The model's MTP (NextN, multi-token prediction) layers: llama.cpp's `<arch>.nextn_predict_layers`."""
    value = metadata_int(info.metadata.get(f"{info.architecture}.nextn_predict_layers"))
    return value if value is not None and value > 0 else 0


def has_mtp_layers(path: str | os.PathLike[str]) -> bool:
    """Whether the GGUF has MTP (NextN) layers, which the target then loads too (for --mode mtp). An unreadable
    file says nothing here: loading it reports why."""
    try:
        return nextn_layers(read_gguf(path)) > 0
    except (GGUFError, OSError):
        return False

"""Low-level GGUF header walk: key/values and the tensor table, with bounds checks everywhere.

Kept apart from `gguf_meta` so that the byte-level loop (which must stay fast on 150k-token
vocabularies) reads on its own. Large arrays are returned as `ArrayRef` (where they lie in the file)
instead of being decoded; callers read them later only if they need them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

_MAX_COUNT = 1 << 24  # keys, tensors: far beyond any real file
_SMALL = 64  # arrays up to this length are decoded eagerly (per-layer values, tiny test vocabularies)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


class GGUFError(Exception):
    """A GGUF file cannot be used; the message names the file, the failed check and what to do."""


@dataclass(frozen=True)
class ArrayRef:
    item_fmt: str  # struct code of the items, "s" for strings, "a" for nested arrays
    count: int
    start: int  # file offset of the first item
    end: int  # file offset just past the last item
    small: list[Any] | None  # the decoded items when count <= _SMALL


@dataclass(frozen=True)
class Header:
    version: int
    fields: dict[str, Any]
    tensors: list[tuple[str, tuple[int, ...], int, int]]  # name, dims, ggml type id, relative offset
    alignment: int
    data_offset: int


class TensorInfo(NamedTuple):
    name: str
    type: str  # ggml type name, e.g. "Q4_K"
    shape: tuple[int, ...]  # GGUF order, ne0 first: token_embd of Qwen2.5-1.5B is (1536, 151936)
    n_bytes: int
    offset: int  # absolute offset of the data in the file


class _Truncated(Exception):
    pass


def parse_header(buf: Any, path: Path) -> Header:
    """Walk the header in `buf` (bytes-like, starting with the magic already checked)."""
    size = len(buf)
    try:
        return _parse(buf, size, path)
    except (_Truncated, struct.error):
        raise GGUFError(
            f"{path}: truncated file: the header ends past the end of the file ({size:,} bytes); "
            "the download was cut short; download it again"
        ) from None
    except UnicodeDecodeError:
        raise GGUFError(
            f"{path}: corrupt header (a key or tensor name is not UTF-8); download it again"
        ) from None


def _parse(buf: Any, size: int, path: Path) -> Header:
    version = _U32.unpack_from(buf, 4)[0]
    if version & 0xFFFF == 0:
        raise GGUFError(f"{path}: big-endian GGUF files are not supported; use a little-endian conversion")
    if version not in (2, 3):
        raise GGUFError(
            f"{path}: GGUF version {version} is not supported (expected 2 or 3); "
            "convert the model again with a current llama.cpp"
        )
    n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
    for what, n in (("tensor count", n_tensors), ("metadata key count", n_kv)):
        if n > _MAX_COUNT:
            raise GGUFError(f"{path}: absurd {what} {n:,}; the file is corrupt; download it again")
    off = 24
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key, off = _string(buf, off, size)
        vtype = _U32.unpack_from(buf, off)[0]
        value, off = _value(buf, off + 4, size, vtype, path, key)
        if key in fields:
            raise GGUFError(f"{path}: metadata key '{key}' appears twice; the file is corrupt")
        fields[key] = value
    tensors = []
    for _ in range(n_tensors):
        name, off = _string(buf, off, size)
        n_dims = _U32.unpack_from(buf, off)[0]
        if not 1 <= n_dims <= 4:  # GGML_MAX_DIMS
            raise GGUFError(
                f"{path}: tensor '{name}' has {n_dims} dimensions (1..4 allowed); the file is corrupt"
            )
        dims = struct.unpack_from(f"<{n_dims}Q", buf, off + 4)
        off += 4 + 8 * n_dims
        if any(d == 0 or d > 1 << 40 for d in dims):
            raise GGUFError(f"{path}: tensor '{name}' has an absurd shape {dims}; the file is corrupt")
        type_id, rel = struct.unpack_from("<IQ", buf, off)
        off += 12
        tensors.append((name, tuple(int(d) for d in dims), type_id, rel))
    alignment = fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(
            f"{path}: general.alignment = {alignment!r} is not a power of two; the file is corrupt"
        )
    data_offset = -(-off // alignment) * alignment
    if data_offset > size:
        raise _Truncated
    return Header(version, fields, tensors, alignment, data_offset)


def _string(buf: Any, off: int, size: int) -> tuple[str, int]:
    n = _U64.unpack_from(buf, off)[0]
    end = off + 8 + n
    if end > size:
        raise _Truncated
    return bytes(buf[off + 8 : end]).decode("utf-8"), end


def _value(buf: Any, off: int, size: int, vtype: int, path: Path, key: str) -> tuple[Any, int]:
    fmt = _SCALARS.get(vtype)
    if fmt is not None:
        return struct.unpack_from("<" + fmt, buf, off)[0], off + struct.calcsize(fmt)
    if vtype == GGUFValueType.STRING:
        n = _U64.unpack_from(buf, off)[0]
        end = off + 8 + n
        if end > size:
            raise _Truncated
        return bytes(buf[off + 8 : end]).decode("utf-8", errors="replace"), end
    if vtype != GGUFValueType.ARRAY:
        raise GGUFError(f"{path}: metadata key '{key}' has unknown value type {vtype}; the file is corrupt")
    itype, count = struct.unpack_from("<IQ", buf, off)
    start = off + 12
    item = _SCALARS.get(itype)
    if item is not None:
        end = start + count * struct.calcsize(item)
        if end > size:
            raise _Truncated
        small = list(struct.unpack_from(f"<{count}{item}", buf, start)) if count <= _SMALL else None
        return ArrayRef(item, count, start, end, small), end
    if itype == GGUFValueType.STRING:
        if start + 8 * count > size:  # every string needs at least its length prefix
            raise _Truncated
        end = _skip_strings(buf, start, count, size)
        small = None
        if count <= _SMALL:
            small, o = [], start
            for _ in range(count):
                s, o = _string(buf, o, size)
                small.append(s)
        return ArrayRef("s", count, start, end, small), end
    if itype == GGUFValueType.ARRAY:  # nested arrays: rare, walk them but keep nothing
        o = start
        for _ in range(count):
            _, o = _value(buf, o, size, GGUFValueType.ARRAY, path, key)
        return ArrayRef("a", count, start, o, None), o
    raise GGUFError(f"{path}: metadata key '{key}' is an array of unknown type {itype}; the file is corrupt")


def _skip_strings(buf: Any, off: int, count: int, size: int) -> int:
    # The hot loop on 150k-entry vocabularies and merge lists: lengths only, no decoding.
    unpack = _U64.unpack_from
    for _ in range(count):
        off += 8 + unpack(buf, off)[0]
    if off > size:
        raise _Truncated
    return off


def tensor_table(path: Path, file_size: int, header: Header) -> tuple[TensorInfo, ...]:
    """The tensors with their byte sizes; a tensor reaching past the end of the file means truncation."""
    out = []
    for name, dims, type_id, rel in header.tensors:
        try:
            gtype = GGMLQuantizationType(type_id)
        except ValueError:
            raise GGUFError(
                f"{path}: tensor '{name}' has unknown type {type_id}; the file is corrupt or newer than "
                "this app (update specchat)"
            ) from None
        block, type_size = GGML_QUANT_SIZES[gtype]
        if dims[0] % block:
            raise GGUFError(
                f"{path}: tensor '{name}' row length {dims[0]} is not a multiple of the {gtype.name} "
                f"block size {block}; the file is corrupt"
            )
        if rel % header.alignment:
            raise GGUFError(
                f"{path}: tensor '{name}' data offset {rel} is not aligned to {header.alignment} bytes; "
                "the file is corrupt; download it again"
            )
        n_bytes = math.prod(dims) * type_size // block
        start = header.data_offset + rel
        if start + n_bytes > file_size:
            raise GGUFError(
                f"{path}: truncated file: tensor '{name}' ends at byte {start + n_bytes:,} but the file "
                f"has only {file_size:,} bytes; the download was cut short; download it again"
            )
        out.append(TensorInfo(name, gtype.name, dims, n_bytes, start))
    return tuple(out)


def metadata_int(value: object) -> int | None:
    """A metadata value that is an integer, or None: GGUF's bool is a Python bool, which is an int to Python, and a
    flag is never a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def quant_label(fields: dict[str, Any], tensors: tuple[TensorInfo, ...]) -> str:
    """ "Q4_K_M" from general.file_type; else the type holding most bytes among the weight matrices."""
    ftype = metadata_int(fields.get("general.file_type"))
    if ftype is not None:
        try:
            from gguf.constants import LlamaFileType  # absent from old gguf releases

            return LlamaFileType(ftype).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (ImportError, ValueError):
            pass
    by_type: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) >= 2:
            by_type[t.type] = by_type.get(t.type, 0) + t.n_bytes
    return max(by_type, key=lambda k: by_type[k]) if by_type else "unknown"

"""gguf_meta on the real models and on tiny GGUFs built to be broken in one specific way."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import gguf
import pytest
from tiny_gguf import VOCAB, write_tiny

from app.models.gguf_meta import GGUFError, clear_cache, read_gguf, read_token_types, read_tokens


def test_reads_the_qwen_target(target_path: Path) -> None:
    info = read_gguf(target_path)
    assert info.architecture == "qwen2"
    assert (info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == (28, 1536, 12, 2)
    assert (info.head_dim_k, info.head_dim_v) == (128, 128)
    assert info.context_length == 32768
    assert info.vocab_size == 151936 and info.vocab_type == "bpe" and info.tokenizer_model == "gpt2"
    assert info.file_type == "Q4_K_M"
    assert (info.bos_id, info.eos_id, info.add_bos) == (151643, 151645, False)
    assert 151645 in info.eog_ids
    assert info.chat_template and "<|im_start|>" in info.chat_template
    assert not info.tied_embeddings
    assert len(info.tensors) == 339
    assert 1.5e9 < info.n_params < 1.9e9
    # The tensor table covers the file: every tensor inside it, none overlapping.
    spans = sorted((t.offset, t.offset + t.n_bytes) for t in info.tensors)
    assert spans[0][0] == info.data_offset
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))
    assert spans[-1][1] <= info.file_size
    embd = next(t for t in info.tensors if t.name == "token_embd.weight")
    assert embd.shape == (1536, 151936) and embd.type == "Q4_K"


def test_fast_and_cached(target_path: Path) -> None:
    clear_cache()
    start = time.perf_counter()
    first = read_gguf(target_path)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"read_gguf took {elapsed:.2f} s on the 1.5B file"  # ~0.04 s measured
    assert read_gguf(target_path) is first


def test_cache_notices_a_changed_file(tmp_path: Path) -> None:
    path = write_tiny(tmp_path / "m.gguf")
    assert read_gguf(path).context_length == 256
    write_tiny(path, extra={"llama.context_length": 512})
    assert read_gguf(path).context_length == 512


def test_tokens_and_fingerprints(target_path: Path, draft_path: Path, smol_path: Path) -> None:
    tokens = read_tokens(target_path)
    assert len(tokens) == 151936
    assert tokens[0] == "!" and tokens[151643] == "<|endoftext|>" and tokens[151645] == "<|im_end|>"
    types = read_token_types(target_path)
    assert types is not None and len(types) == 151936 and types[151643] == 3  # control
    smol = read_gguf(smol_path)
    assert read_tokens(smol_path)[0] == "<|endoftext|>" and smol.vocab_size == 49152
    assert smol.tied_embeddings and smol.architecture == "llama" and smol.file_type == "Q4_1"
    fp = read_gguf(target_path).tokenizer_fingerprint
    assert fp == read_gguf(draft_path).tokenizer_fingerprint
    assert fp != smol.tokenizer_fingerprint


def test_agrees_with_gguf_reader(smol_path: Path) -> None:
    """Our header walk against the gguf package's own reader, on a real file."""
    ours = read_gguf(smol_path)
    ref = gguf.GGUFReader(smol_path)
    assert ours.data_offset == ref.data_offset
    assert [(t.name, t.type, t.n_bytes, t.offset) for t in ours.tensors] == [
        (t.name, t.tensor_type.name, int(t.n_bytes), int(t.data_offset)) for t in ref.tensors
    ]
    assert [t.shape for t in ours.tensors] == [tuple(int(d) for d in t.shape) for t in ref.tensors]
    assert ours.n_params == sum(int(t.n_elements) for t in ref.tensors)
    for key in ("llama.block_count", "llama.rope.freq_base", "tokenizer.ggml.bos_token_id"):
        assert ours.metadata[key] == pytest.approx(ref.fields[key].contents())
    assert ours.chat_template == ref.fields["tokenizer.chat_template"].contents()


def test_tiny_file_all_fields(tmp_path: Path) -> None:
    info = read_gguf(write_tiny(tmp_path / "t.gguf", quantized=True, extra={"general.file_type": 7}))
    assert info.vocab_size == len(VOCAB) and info.n_layer == 2 and info.head_dim_k == 16
    assert info.file_type == "Q8_0" and not info.tied_embeddings
    assert {t.name: t.type for t in info.tensors} == {
        "token_embd.weight": "F32", "blk.0.attn_norm.weight": "F16", "output.weight": "Q8_0",
    }  # fmt: skip
    assert read_tokens(info.path) == VOCAB
    # Without general.file_type the label comes from the tensor holding most bytes.
    assert read_gguf(write_tiny(tmp_path / "u.gguf")).file_type == "F32"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="no such file") as e:
        read_gguf(tmp_path / "nope.gguf")
    assert "nope.gguf" in str(e.value)


def test_folder_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="is a folder"):
        read_gguf(tmp_path)


@pytest.mark.parametrize(
    "content", [b"", b"GGUF", b"PK\x03\x04" + b"\0" * 100, b"<html>not found</html>" * 10]
)
def test_not_a_gguf(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "fake.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFError, match="not a GGUF file") as e:
        read_gguf(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(("n_bytes", "where"), [(5 << 20, "tensor"), (100_000, "header")])
def test_truncated(tmp_path: Path, smol_path: Path, n_bytes: int, where: str) -> None:
    """A download cut short: in the tensor data (5 MB) or inside the 1.8 MB header."""
    path = tmp_path / "cut.gguf"
    with open(smol_path, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(n_bytes))
    with pytest.raises(GGUFError, match="truncated file") as e:
        read_gguf(path)
    message = str(e.value)
    assert str(path) in message and "download it again" in message
    if where == "tensor":
        assert "tensor 'token_embd.weight' ends at byte" in message and f"{n_bytes:,} bytes" in message


def test_truncated_tiny_at_every_cut(tmp_path: Path) -> None:
    full = write_tiny(tmp_path / "full.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    for n in range(24, len(full), max(1, len(full) // 97)):
        cut.write_bytes(full[:n])
        with pytest.raises(GGUFError):
            read_gguf(cut)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("general.architecture", "missing required metadata key 'general.architecture'"),
        ("llama.block_count", "missing required metadata key 'llama.block_count'"),
        ("llama.context_length", "missing required metadata key 'llama.context_length'"),
        ("tokenizer.ggml.tokens", "missing required metadata key 'tokenizer.ggml.tokens'"),
        ("tokenizer.ggml.model", "missing required metadata key 'tokenizer.ggml.model'"),
    ],
)
def test_missing_key(tmp_path: Path, drop: str, message: str) -> None:
    path = write_tiny(tmp_path / "m.gguf", drop=[drop])
    with pytest.raises(GGUFError, match=message) as e:
        read_gguf(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"llama.block_count": 1_000_000}, r"'llama.block_count' = 1,000,000 is outside any sane range"),
        ({"llama.block_count": 0}, r"'llama.block_count' = 0 is outside"),
        ({"llama.embedding_length": 1 << 30}, r"'llama.embedding_length' = 1,073,741,824 is outside"),
        ({"llama.context_length": 0}, r"'llama.context_length' = 0 is outside"),
        ({"llama.block_count": "twenty"}, r"'llama.block_count' has the wrong type \(str\)"),
        ({"tokenizer.ggml.tokens": [1, 2, 3]}, r"'tokenizer.ggml.tokens' is not a list of strings"),
        ({"general.alignment": 24}, r"general.alignment = 24 is not a power of two"),
    ],
)
def test_absurd_or_wrong_values(tmp_path: Path, extra: dict[str, object], message: str) -> None:
    with pytest.raises(GGUFError, match=message):
        read_gguf(write_tiny(tmp_path / "m.gguf", extra=extra))


def test_corrupt_counts_and_shapes(tmp_path: Path) -> None:
    good = write_tiny(tmp_path / "m.gguf").read_bytes()
    # Header layout: magic, version (u32), tensor count (u64), key count (u64).
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good[:8] + struct.pack("<Q", 1 << 40) + good[16:])
    with pytest.raises(GGUFError, match="absurd tensor count"):
        read_gguf(bad)
    bad.write_bytes(good[:4] + struct.pack("<I", 99) + good[8:])
    with pytest.raises(GGUFError, match="GGUF version 99 is not supported"):
        read_gguf(bad)
    # An unknown tensor type id: patch the type field that follows the first tensor's dimensions.
    name = b"token_embd.weight"
    at = good.index(name) + len(name) + 4 + 2 * 8
    bad.write_bytes(good[:at] + struct.pack("<I", 250) + good[at + 4 :])
    with pytest.raises(GGUFError, match="tensor 'token_embd.weight' has unknown type 250"):
        read_gguf(bad)


def test_mmproj_is_named(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="vision projector"):
        read_gguf(write_tiny(tmp_path / "mmproj.gguf", arch="clip"))


def test_copy_reads_like_the_original(tmp_path: Path, smol_path: Path) -> None:
    copy = tmp_path / smol_path.name
    shutil.copyfile(smol_path, copy)
    a, b = read_gguf(smol_path), read_gguf(copy)
    assert a.tensors == b.tensors and a.tokenizer_fingerprint == b.tokenizer_fingerprint

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


def write_mamba(path: Path, *, n_vocab: int = 64, n_embd: int = 32, n_layer: int = 2, d_inner: int = 64,
                d_state: int = 8, d_conv: int = 4, dt_rank: int = 4, seed: int = 0) -> Path:
    """A loadable recurrent model (llama.cpp's `mamba` architecture) with random weights: a state, no KV cache."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "mamba")
    for key, value in (("context_length", 256), ("embedding_length", n_embd), ("block_count", n_layer),
                       ("feed_forward_length", 0), ("attention.head_count", 0), ("ssm.conv_kernel", d_conv),
                       ("ssm.inner_size", d_inner), ("ssm.state_size", d_state), ("ssm.time_step_rank", dt_rank)):
        w.add_uint32(f"mamba.{key}", value)
    w.add_float32("mamba.attention.layer_norm_rms_epsilon", 1e-5)
    _toy_tokenizer(w, n_vocab)

    def rand(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    output = rand(n_vocab, n_embd, scale=0.5)
    output[2] = 0.0  # the end-of-text token's logit is 0, below the best of the others: replies run to n_predict
    w.add_tensor("output.weight", output)
    for i in range(n_layer):  # numpy shapes are ggml's reversed (llama.cpp src/models/mamba.cpp)
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ssm_in.weight", rand(2 * d_inner, n_embd))
        w.add_tensor(b + "ssm_conv1d.weight", rand(d_inner, d_conv))
        w.add_tensor(b + "ssm_conv1d.bias", rand(d_inner))
        w.add_tensor(b + "ssm_x.weight", rand(dt_rank + 2 * d_state, d_inner))
        w.add_tensor(b + "ssm_dt.weight", rand(d_inner, dt_rank))
        w.add_tensor(b + "ssm_dt.bias", rand(d_inner))
        w.add_tensor(b + "ssm_a", -np.exp(rand(d_inner, d_state)))
        w.add_tensor(b + "ssm_d", np.ones(d_inner, np.float32))
        w.add_tensor(b + "ssm_out.weight", rand(n_embd, d_inner))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_lfm2(path: Path, *, n_vocab: int = 64, n_embd: int = 64, layers: str = "cacac", n_head: int = 4,
               n_head_kv: int = 2, n_ff: int = 128, l_cache: int = 3, seed: int = 0, noise: float = 0.0,
               noise_seed: int = 1) -> Path:
    """A loadable hybrid model (llama.cpp's `lfm2`: short-convolution layers with a recurrent state, "c", between
    attention layers with a KV cache, "a") with random weights. `noise`: the same weights plus this much of
    another draw (seeded by `noise_seed`), a draft that agrees with the `noise=0` model often but not always."""
    rng, other = np.random.default_rng(seed), np.random.default_rng(noise_seed)
    head_dim = n_embd // n_head
    w = gguf.GGUFWriter(str(path), "lfm2")
    for key, value in (("context_length", 1024), ("embedding_length", n_embd), ("block_count", len(layers)),
                       ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                       ("shortconv.l_cache", l_cache), ("vocab_size", n_vocab)):
        w.add_uint32(f"lfm2.{key}", value)
    w.add_array("lfm2.attention.head_count_kv", [n_head_kv if kind == "a" else 0 for kind in layers])
    w.add_float32("lfm2.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("lfm2.rope.freq_base", 10000.0)
    _toy_tokenizer(w, n_vocab)

    def rand(*shape: int, scale: float = 0.2) -> np.ndarray:
        value = rng.standard_normal(shape) * scale
        if noise:
            value = value + other.standard_normal(shape) * scale * noise
        return value.astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0))
    w.add_tensor("token_embd_norm.weight", np.ones(n_embd, np.float32))
    output = rand(n_vocab, n_embd, scale=0.5)
    output[2] = 0.0  # the end-of-text token's logit is 0, below the best of the others: replies run to n_predict
    w.add_tensor("output.weight", output)
    for i, kind in enumerate(layers):  # numpy shapes are ggml's reversed (llama.cpp src/models/lfm2.cpp)
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_down.weight", rand(n_embd, n_ff))
        if kind == "a":
            w.add_tensor(b + "attn_q_norm.weight", np.ones(head_dim, np.float32))
            w.add_tensor(b + "attn_k_norm.weight", np.ones(head_dim, np.float32))
            w.add_tensor(b + "attn_q.weight", rand(n_embd, n_embd))
            w.add_tensor(b + "attn_k.weight", rand(n_head_kv * head_dim, n_embd))
            w.add_tensor(b + "attn_v.weight", rand(n_head_kv * head_dim, n_embd))
            w.add_tensor(b + "attn_output.weight", rand(n_embd, n_embd))
        else:
            w.add_tensor(b + "shortconv.conv.weight", rand(n_embd, l_cache, scale=0.5))
            w.add_tensor(b + "shortconv.in_proj.weight", rand(3 * n_embd, n_embd))
            w.add_tensor(b + "shortconv.out_proj.weight", rand(n_embd, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _toy_tokenizer(w: gguf.GGUFWriter, n_vocab: int) -> None:
    """Tokens t0..t{n-1} (a gpt2-style vocabulary with one merge): the tests speak in token ids."""
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_vocab)])
    w.add_array("tokenizer.ggml.token_type", [1] * n_vocab)
    w.add_array("tokenizer.ggml.merges", ["t 1"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)



def write_qwen35(path: Path, *, n_vocab: int = 16, n_embd: int = 64, n_layer: int = 4, full_attention_interval: int = 4,
                 nextn: bool = True, n_head: int = 4, n_head_kv: int = 2, head_dim: int = 16, n_rot: int = 8,
                 n_ff: int = 128, d_conv: int = 4, d_state: int = 16, n_group: int = 2, dt_rank: int = 4,
                 mtp_agree: float = 0.0, text_tokens: bool = False, seed: int = 0) -> Path:
    """A loadable Qwen3.5-style hybrid (llama.cpp's `qwen35`: gated-delta-net linear-attention layers with a recurrent
    state, every `full_attention_interval`-th layer gated full attention with a KV cache) with random weights.
    `n_layer` counts the trunk; `nextn` appends one MTP (NextN) block as the last layer (`block_count` = n_layer + 1,
    `nextn_predict_layers` = 1), which llama.cpp loads only with the model parameter `load_mtp`.
    `mtp_agree` (0..1): 0 draws the MTP block at random (llama.cpp accepts ~2% of its drafts); above 0 the trunk
    blocks' output projections shrink by (1 - mtp_agree), so the next token depends mostly on the current one, and
    the MTP block passes its token's embedding straight to the shared head, predicting that bigram one step ahead:
    at 1 the trunk is a pure bigram and every draft is accepted (seed 0, 4 drafted: 0.99 ~93%, 0.95 ~64%, 0.9 ~1%).
    `text_tokens`: mark the tokens user-defined, so llama.cpp's text tokenizer finds "t3" in a prompt (the toy
    vocabulary's gpt2 pre-tokenizer splits "t" from "3", so plain text yields no tokens): for the native tools,
    which take text prompts."""
    rng = np.random.default_rng(seed)
    n_all = n_layer + (1 if nextn else 0)
    key_dim, value_dim = d_state * n_group, d_state * dt_rank  # head_k_dim = head_v_dim = d_state
    trunk_out = 0.2 * (1.0 - mtp_agree)
    w = gguf.GGUFWriter(str(path), "qwen35")
    for key, value in (("context_length", 1024), ("embedding_length", n_embd), ("block_count", n_all),
                       ("feed_forward_length", n_ff), ("attention.head_count", n_head),
                       ("attention.head_count_kv", n_head_kv), ("attention.key_length", head_dim),
                       ("attention.value_length", head_dim), ("rope.dimension_count", n_rot),
                       ("full_attention_interval", full_attention_interval), ("ssm.conv_kernel", d_conv),
                       ("ssm.inner_size", value_dim), ("ssm.state_size", d_state), ("ssm.time_step_rank", dt_rank),
                       ("ssm.group_count", n_group), ("vocab_size", n_vocab)):
        w.add_uint32(f"qwen35.{key}", value)
    if nextn:
        w.add_uint32("qwen35.nextn_predict_layers", 1)
    third = n_rot // 6  # interleaved M-RoPE sections (text uses one position for all): they sum to n_rot / 2
    w.add_array("qwen35.rope.dimension_sections", [n_rot // 2 - 2 * third, third, third, 0])
    w.add_float32("qwen35.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen35.rope.freq_base", 10000000.0)
    _toy_tokenizer(w, n_vocab)
    if text_tokens:
        w.kv_data[0].pop("tokenizer.ggml.token_type")
        w.add_array("tokenizer.ggml.token_type", [int(gguf.TokenType.USER_DEFINED)] * n_vocab)

    def rand(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    def attention_and_ffn(b: str, full: bool, out: float) -> None:  # `out` scales what the block adds back
        w.add_tensor(b + "attn_norm.weight", ones(n_embd))
        w.add_tensor(b + "post_attention_norm.weight", ones(n_embd))
        if full:  # the q projection carries a sigmoid output gate: 2 * head_dim per head
            w.add_tensor(b + "attn_q.weight", rand(2 * n_head * head_dim, n_embd))
            w.add_tensor(b + "attn_k.weight", rand(n_head_kv * head_dim, n_embd))
            w.add_tensor(b + "attn_v.weight", rand(n_head_kv * head_dim, n_embd))
            w.add_tensor(b + "attn_output.weight", rand(n_embd, n_head * head_dim, scale=out))
            w.add_tensor(b + "attn_q_norm.weight", ones(head_dim))
            w.add_tensor(b + "attn_k_norm.weight", ones(head_dim))
        else:  # gated delta net: conv over [q k v], per-v-head decay (ssm_a, ssm_dt, ssm_alpha) and beta
            w.add_tensor(b + "attn_qkv.weight", rand(2 * key_dim + value_dim, n_embd))
            w.add_tensor(b + "attn_gate.weight", rand(value_dim, n_embd))
            w.add_tensor(b + "ssm_conv1d.weight", rand(2 * key_dim + value_dim, d_conv, scale=0.5))
            w.add_tensor(b + "ssm_dt.bias", rand(dt_rank))
            w.add_tensor(b + "ssm_a", -np.exp(rand(dt_rank)))
            w.add_tensor(b + "ssm_beta.weight", rand(dt_rank, n_embd))
            w.add_tensor(b + "ssm_alpha.weight", rand(dt_rank, n_embd))
            w.add_tensor(b + "ssm_norm.weight", ones(d_state))
            w.add_tensor(b + "ssm_out.weight", rand(n_embd, value_dim, scale=out))
        w.add_tensor(b + "ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(b + "ffn_down.weight", rand(n_embd, n_ff, scale=out))

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0))
    w.add_tensor("output_norm.weight", ones(n_embd))
    output = rand(n_vocab, n_embd, scale=0.5)
    output[2] = 0.0  # the end-of-text token's logit is 0, below the best of the others: replies run to n_predict
    w.add_tensor("output.weight", output)
    for i in range(n_layer):  # numpy shapes are ggml's reversed (llama.cpp src/models/qwen35.cpp)
        attention_and_ffn(f"blk.{i}.", (i + 1) % full_attention_interval == 0, trunk_out)
    if nextn:  # MTP: a full-attention block over eh_proj([enorm(embed(next token)); hnorm(trunk hidden)])
        b = f"blk.{n_layer}."
        attention_and_ffn(b, True, 0.2 if mtp_agree == 0 else 0.0)
        eh_proj = rand(n_embd, 2 * n_embd, scale=0.1)
        if mtp_agree:
            eh_proj = np.concatenate([np.eye(n_embd), np.zeros((n_embd, n_embd))], axis=1).astype(np.float32)
        w.add_tensor(b + "nextn.eh_proj.weight", eh_proj)
        w.add_tensor(b + "nextn.enorm.weight", ones(n_embd))
        w.add_tensor(b + "nextn.hnorm.weight", ones(n_embd))
        w.add_tensor(b + "nextn.shared_head_norm.weight", ones(n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

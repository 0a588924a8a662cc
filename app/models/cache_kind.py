"""What a model's cache is, read from its GGUF, and how SpecChat rolls it back after a rejected draft.

Attention models keep one KV entry per position: a rollback cuts entries. Recurrent models (Mamba, RWKV) keep one
state per sequence, and hybrid ones (LFM2, Qwen3.5, Granite 4 H, Nemotron-H ...) keep such a state beside a KV
cache: a cut back needs llama.cpp's per-token state snapshots where the architecture has them, else a checkpoint of
the state and a replay (app/llama_backend/core.py, LlamaContext.truncate). The lists are llama.cpp's own
(src/llama-arch.cpp of the vendored version: llm_arch_is_recurrent, llm_arch_is_hybrid,
llm_arch_supports_rs_rollback); a model the lists do not know is told apart at load (llama_model_is_hybrid).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.models.gguf_meta import GGUFInfo, nextn_layers
from app.models.gguf_parse import metadata_int

__all__ = ["CacheKind", "StateLayout", "cache_kind", "mtp_note", "state_layout"]

RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
SNAPSHOT_ARCHS = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2",
    "lfm2moe", "bailingmoe3",
})
SNAPSHOT_TOKENS = 8  # ContextConfig.n_rs_seq: the longest rollback a snapshot serves (K <= 8 drafts)


@dataclass(frozen=True, slots=True)
class CacheKind:
    kind: str  # "attention", "sliding-window", "recurrent" or "hybrid"
    snapshots: bool  # llama.cpp keeps per-token state snapshots for this architecture
    window: int = 0  # sliding-window models: the window in tokens

    def rollback(self, role: str = "target") -> str:
        """How a rejected draft is rolled back, in a phrase for the doctor, the picker and check-pair. A draft
        model decodes one token at a time, so its cuts reach past what snapshots keep: it takes a checkpoint."""
        if self.kind == "attention":
            return "rollback by cutting the KV cache"
        if self.kind == "sliding-window":
            return f"window of {self.window:,} tokens; rollback by cutting the cache, which keeps the whole window"
        if role == "draft":
            return "rollback by a state checkpoint at each step and a replay of the accepted tokens"
        if self.snapshots:
            return (f"rollback by llama.cpp's state snapshots (up to {SNAPSHOT_TOKENS} tokens), a longer cut by a "
                    "state checkpoint and a replay")
        return "rollback by a state checkpoint and a replay of the accepted tokens (no snapshots in llama.cpp)"

    def describe(self, role: str = "target") -> str:
        return f"{self.kind}: {self.rollback(role)}"


def cache_kind(info: GGUFInfo) -> CacheKind:
    arch = info.architecture
    snapshots = arch in SNAPSHOT_ARCHS
    if arch in RECURRENT_ARCHS:
        return CacheKind("recurrent", snapshots)
    if arch in HYBRID_ARCHS:
        return CacheKind("hybrid", snapshots)
    window = metadata_int(info.metadata.get(f"{arch}.attention.sliding_window"))
    if window is not None and window > 0:
        return CacheKind("sliding-window", False, window)
    return CacheKind("attention", False)


@dataclass(frozen=True, slots=True)
class StateLayout:
    """Which layers keep a KV cache and which a recurrent state, and that state's size: what the memory meter
    counts for a recurrent or hybrid model (llama.cpp's llama_hparams::n_embd_r / n_embd_s, f32 rows)."""

    attention: tuple[bool, ...]  # per layer: a KV cache
    recurrent: tuple[bool, ...]  # per layer: a recurrent state
    state_floats: int  # per recurrent layer and sequence: conv state + SSM/WKV state
    snapshots: int  # extra copies llama.cpp keeps for rollback (ContextConfig.n_rs_seq where it has them)


def state_layout(info: GGUFInfo) -> StateLayout:
    """Per-layer caches of `info`'s model. An attention model: every layer a KV cache, no state. A hybrid whose
    split the metadata does not give is counted with both in every layer (never under the real need)."""
    n, arch, meta = info.n_layer, info.architecture, info.metadata
    kind = cache_kind(info)
    if kind.kind in ("attention", "sliding-window"):
        return StateLayout((True,) * n, (False,) * n, 0, 0)

    def key(name: str, default: int = 0) -> int:
        value = metadata_int(meta.get(f"{arch}.{name}"))
        return default if value is None else value

    heads_kv = meta.get(f"{arch}.attention.head_count_kv")
    if kind.kind == "recurrent":
        attention = (False,) * n
    elif isinstance(heads_kv, list) and len(heads_kv) == n:  # LFM2, Granite 4 H, Nemotron-H, Jamba: 0 = state
        attention = tuple(bool(h) for h in heads_kv)
    elif key("full_attention_interval"):  # Qwen3-Next, Qwen3.5: every k-th layer full attention
        every = key("full_attention_interval")
        attention = tuple((il + 1) % every == 0 for il in range(n))
    else:
        attention = (True,) * n
    recurrent = tuple(not a for a in attention) if any(attention) and not all(attention) else (True,) * n
    mtp = nextn_layers(info)  # the last layers: an MTP head, whose cache is the MTP context's, not the target's
    if 0 < mtp < n:
        attention = attention[: n - mtp] + (False,) * mtp
        recurrent = recurrent[: n - mtp] + (False,) * mtp
    if key("wkv.head_size"):  # RWKV
        floats = key("token_shift_count", 2) * info.n_embd + info.n_embd * key("wkv.head_size")
    elif key("shortconv.l_cache"):  # LFM2
        floats = info.n_embd * (key("shortconv.l_cache") - 1)
    else:  # Mamba, Mamba-2 and the delta-net layers of Qwen3-Next / Qwen3.5
        d_inner, d_state = key("ssm.inner_size"), key("ssm.state_size")
        floats = max(key("ssm.conv_kernel") - 1, 0) * (d_inner + 2 * key("ssm.group_count") * d_state)
        floats += d_state * d_inner
    return StateLayout(attention, recurrent, floats, SNAPSHOT_TOKENS if kind.snapshots else 0)


def mtp_note(info: GGUFInfo) -> str:
    """What the picker and check-pair say of a model with MTP (NextN) layers ("" without)."""
    n = nextn_layers(info)
    if not n:
        return ""
    heads = "an MTP head" if n == 1 else f"{n} chained MTP heads (SpecChat drafts with single heads so far)"
    return f"The target has {heads}: --mode mtp drafts with it, no draft model needed"

"""A target model's own MTP (NextN) head as a draft context: llama.cpp's `draft-mtp` self-speculation.

Models such as Qwen3.5/3.6, GLM-4.x and DeepSeek carry one or more extra "next-token" layers. llama.cpp runs them
in a second context of the target model (LLAMA_CONTEXT_TYPE_MTP, `ctx_other` = the target's context) whose input
at position p is the token there together with the target's last hidden state at p - 1 ("h_nextn"). The head's
own cache must hold that pairing for every position before the draft, so it follows every target decode
(`follow`, common/speculative.cpp's process()), and a draft feeds the head its own hidden state back one token at
a time (`draft`). This module mirrors common_speculative_impl_draft_mtp for a single head with its own cache (the
Qwen3.5 case); a model whose heads share the target's cache (Gemma 4) or chain several heads (Step-3.5) is refused
by name.

The hidden-state functions are in llama.cpp's src/llama-ext.h, exported without C linkage and not bound by
llama-cpp-python: they are looked up here by their C++ names, and a build without them is refused by name.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from app.llama_backend.core import (
    ContextConfig,
    FollowerSnapshot,
    LlamaContext,
    LlamaError,
    copy_sequence_state,
    default_threads,
    set_sequence_state,
)

__all__ = ["MtpContext", "MtpSnapshot", "mtp_layers"]

_EXT = {
    "set_embeddings_nextn": ("_Z26llama_set_embeddings_nextnP13llama_contextbb",
                             [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None),
    "get_embeddings_nextn_ith": ("_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
                                 [ctypes.c_void_p, ctypes.c_int32], ctypes.POINTER(ctypes.c_float)),
    "get_ctx_other": ("_Z19llama_get_ctx_otherP13llama_context", [ctypes.c_void_p], ctypes.c_void_p),
}
_ext_fns: dict[str, Any] = {}  # ctypes function pointers


def _ext(name: str) -> Any:
    if not _ext_fns:
        lib = llama_cpp.llama_cpp._lib
        for key, (symbol, argtypes, restype) in _EXT.items():
            try:
                fn = getattr(lib, symbol)
            except AttributeError as e:
                raise LlamaError(f"This llama.cpp build has no {symbol} (llama-ext.h): MTP drafting needs the "
                                 "llama.cpp vendored in llama-cpp-python 0.3.36 or newer") from e
            fn.argtypes, fn.restype = argtypes, restype
            _ext_fns[key] = fn
    return _ext_fns[name]


def mtp_layers(model_handle: llama_cpp.llama_model_p) -> int:
    """The MTP (NextN) layers a loaded model has (0: none, no MTP mode)."""
    return int(llama_cpp.llama_model_n_layer_nextn(model_handle))


@dataclass(frozen=True, slots=True)
class MtpSnapshot:
    """A copy of the MTP head's cache and of the hidden state its next position pairs with."""

    tokens: tuple[int, ...]
    state: ctypes.Array[ctypes.c_uint8] = field(repr=False)
    pending: np.ndarray = field(repr=False)

    @property
    def nbytes(self) -> int:
        return len(self.state) + self.pending.nbytes


class MtpContext:
    """The target's MTP head, with a cache that mirrors the target's positions.

    `follow(tokens, start)` after each target decode pairs each token with the target's hidden state of the
    position before it; `cut(n)` mirrors the target's cuts; `draft` proposes from the last context token."""

    def __init__(self, target: LlamaContext, config: ContextConfig) -> None:
        model = target.model
        if mtp_layers(model.handle) <= 0:
            raise LlamaError(f"{model.path.name} has no MTP (NextN) layers: it cannot draft for itself. "
                             "Use --mode lookup, or a model with MTP heads (Qwen3.5/3.6, GLM-4.5 ...).")
        if not model.config.load_mtp:
            raise LlamaError(f"{model.path.name} was loaded without its MTP layers (ModelConfig.load_mtp)")
        if mtp_layers(model.handle) > 1:
            raise LlamaError(f"{model.path.name} has {mtp_layers(model.handle)} chained MTP heads; SpecChat "
                             "drafts with single-head models so far (Qwen3.5/3.6)")
        self.target = target
        self.model = model
        params = llama_cpp.llama_context_default_params()
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target._ctx
        params.n_ctx = target.n_ctx
        params.n_batch = target.n_batch
        params.n_ubatch = target.n_batch
        params.n_seq_max = 1
        params.n_rs_seq = 0
        threads = config.n_threads or default_threads()
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise LlamaError(f"llama.cpp could not create the MTP context of {model.path.name} (out of memory?)")
        if _ext("get_ctx_other")(self._ctx) == ctypes.cast(target._ctx, ctypes.c_void_p).value:
            raise LlamaError(f"{model.path.name}'s MTP head shares the target's cache (Gemma 4 style), which "
                             "SpecChat does not drive yet")
        _ext("set_embeddings_nextn")(target._ctx, True, False)  # every row's hidden state, not just outputs'
        _ext("set_embeddings_nextn")(self._ctx, True, True)
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self._ctx)
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model.handle))
        self.n_vocab = model.n_vocab
        self.tokens: list[int] = []  # the positions the head holds paired with the target's hidden states
        self.n_past = 0  # positions in its cache: those, and a draft's beyond them until the next follow or cut
        # The target's hidden state of the last position the head has paired, and of the rows of the target's
        # last decode (a verify: row a's is what the next draft pairs the correction token with).
        self._pending = np.zeros(self.n_embd, np.float32)
        self._rows: tuple[int, np.ndarray] | None = None  # (first position, rows x n_embd)
        self.native_ms = 0.0

    def _target_rows(self, n: int) -> np.ndarray:
        get = _ext("get_embeddings_nextn_ith")
        rows = np.empty((n, self.n_embd), np.float32)
        for i in range(n):
            ptr = get(self.target._ctx, i)
            if not ptr:
                raise LlamaError("llama.cpp returned no hidden state for a row of the target's batch")
            rows[i] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))
        return rows

    def follow(self, tokens: Sequence[int], start: int) -> None:
        """The target just decoded `tokens` at positions start..: pair each with the hidden state before it.
        Positions the head already holds (a replay of the target's, or the one position re-decoded when the
        head re-joins, `rejoin`) only bring their hidden states."""
        rows = self._target_rows(len(tokens))
        self._drop_drafts()
        held = len(self.tokens)
        if start > held:
            raise LlamaError(f"the MTP head holds {held} positions, the target decoded from {start}: it missed some")
        skip = held - start
        if list(tokens[:skip]) != self.tokens[start:held][: len(tokens)]:
            raise LlamaError("the MTP head holds other tokens than the target re-decoded")
        if skip < len(tokens):
            before = rows[skip - 1] if skip > 0 else self._pending
            pairs = np.vstack([before[None, :], rows[skip:-1]])
            self._decode(list(tokens[skip:]), held, pairs, outputs=False)
            self.tokens.extend(tokens[skip:])
        self._rows = (start, rows)
        if start + len(tokens) >= held:
            self._pending = rows[-1].copy()

    def cut(self, n: int) -> None:
        """Mirror the target's cut to n positions: the head's pairs beyond go, and the hidden state the next
        token pairs with is the target's of position n - 1 (from its last decode's rows where they reach)."""
        self._drop_drafts()
        if n < len(self.tokens):
            llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1)
            del self.tokens[n:]
            self.n_past = n
        if n == 0:
            self._pending = np.zeros(self.n_embd, np.float32)
        elif self._rows is not None:
            first, rows = self._rows
            if first <= n - 1 < first + len(rows):
                self._pending = rows[n - 1 - first].copy()

    def _drop_drafts(self) -> None:
        """A draft's positions pair drafted tokens with the head's own hidden states: never kept."""
        if self.n_past > len(self.tokens):
            llama_cpp.llama_memory_seq_rm(self._mem, 0, len(self.tokens), -1)
            self.n_past = len(self.tokens)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()
        self.n_past = 0
        self._pending = np.zeros(self.n_embd, np.float32)
        self._rows = None

    def snapshot_bytes(self) -> int:
        return int(llama_cpp.llama_state_seq_get_size(self._ctx, 0)) + self._pending.nbytes

    def snapshot(self) -> MtpSnapshot:
        """The head's cache of the positions it holds (a draft's dropped first), and the hidden state the next
        token pairs with: kept with the target's cache (CacheSnapshot.follower) when a prompt cache copies it."""
        self._drop_drafts()
        state = copy_sequence_state(self._ctx, "the MTP head's cache")
        return MtpSnapshot(tuple(self.tokens), state, self._pending.copy())

    def restore(self, snapshot: FollowerSnapshot) -> None:
        """Put back what `snapshot` copied (the target's cache is put back alongside); on failure the head is
        left empty."""
        if not isinstance(snapshot, MtpSnapshot):
            raise LlamaError("not a copy of an MTP head's cache")
        self.clear()
        if not set_sequence_state(self._ctx, snapshot.state):
            self.clear()
            raise LlamaError("llama.cpp could not restore the MTP head's cache")
        self.tokens.extend(snapshot.tokens)
        self.n_past = len(self.tokens)
        self._pending = snapshot.pending.copy()

    def draft_logits(self, token: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One draft step: the head's logits for the token after `token` (at position n_past) paired with `h`,
        and its own hidden state, which the next step pairs the drafted token with. The first step of a draft
        is `token` = the context's last token (which the target has not decoded yet) with `pending`."""
        self._decode([token], self.n_past, h[None, :], outputs=True)
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        h_ptr = _ext("get_embeddings_nextn_ith")(self._ctx, -1)
        if not ptr or not h_ptr:
            raise LlamaError("llama.cpp returned no logits or hidden state for the MTP head's draft row")
        return (np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)),
                np.array(np.ctypeslib.as_array(h_ptr, shape=(self.n_embd,))))

    @property
    def pending(self) -> np.ndarray:
        return self._pending

    def _decode(self, tokens: list[int], start: int, h: np.ndarray, outputs: bool) -> None:
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        h = np.ascontiguousarray(h, dtype=np.float32)
        for i, token in enumerate(tokens):
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
            if idx < 0:
                raise LlamaError(f"the MTP head's batch refused token {token} (error {idx})")
            pos = llama_cpp.llama_pos(start + i)
            llama_cpp.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
            row = h[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            llama_cpp.llama_batch_ext_set_embd_token(batch, idx, llama_cpp.llama_embd(row, 1, self.n_embd))
            if outputs and i == len(tokens) - 1:
                llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
        t0 = time.perf_counter()
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        llama_cpp.llama_synchronize(self._ctx)
        self.native_ms += (time.perf_counter() - t0) * 1000.0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, start, -1)
            raise LlamaError(f"the MTP head of {self.model.path.name} failed to decode (code {rc})")
        self.n_past = start + len(tokens)

    def close(self) -> None:
        if self._ctx:
            _ext("set_embeddings_nextn")(self.target._ctx, False, False)
            llama_cpp.llama_batch_ext_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

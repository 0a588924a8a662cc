"""What the engine asks of a target: the surface of app.llama_backend's LlamaContext it uses, as protocols.

The engine is typed against these, not the class, so a stand-in (a recorded reply with measured row costs, as
the policy replays in tools/bench use) drives the real loop without `type: ignore`. LlamaContext satisfies
them as it is (checked by mypy in tests/test_architecture.py's typing run).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np


class TargetModel(Protocol):
    """A model as the engine's output side sees it: what ends a reply, and how a token reads."""

    def is_eog(self, token: int) -> bool: ...

    def piece(self, token: int) -> bytes: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...


class TargetContext(Protocol):
    """A KV cache with logits: decode rows, read them, keep or cut a prefix. Owned by one thread."""

    n_ctx: int
    native_ms: float  # time inside the backend's decode, to tell engine overhead from model time
    tokens: list[int]  # what the cache holds, in order

    @property
    def model(self) -> TargetModel: ...

    @property
    def max_rows(self) -> int: ...

    @property
    def n_past(self) -> int: ...

    def decode(self, tokens: Sequence[int], logits_for: str = "last") -> None: ...

    def decode_batches(self, tokens: Sequence[int], logits_for: str = "last") -> Iterator[int]: ...

    def logits(self, row: int = -1) -> np.ndarray: ...

    def keep_last_logits(self) -> None: ...

    def kept_logits(self, n: int) -> np.ndarray | None: ...

    def truncate(self, n_keep: int) -> None: ...

    def keep_common_prefix(self, tokens: Sequence[int], known: int = 0) -> int: ...

"""The token ids of recent turns, so that a follow-up prompt starts with the ids the target saw and wrote.

Re-tokenizing a reply's text need not give back the reply's ids: a sampled reply may write `"` `...` `"\\``
where the tokenizer makes `..."` `\\``. From that token on, the next turn's prompt differs from what the KV
cache holds, and the rest of the reply is prefilled again: seconds on a CPU, before the first token of a
follow-up (3.6 s instead of 0.6 s after a 414-token sampled reply on 2 cores, docs/BENCHMARKS.md). llama.cpp's
own chat (llama-cli) keeps the generated ids for the same reason; llama-server re-tokenizes and pays it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Tokenize = Callable[[str, bool], list[int]]  # (text, at the start of the prompt: add BOS) -> ids


@dataclass(frozen=True, slots=True)
class Turn:
    text: str  # the templated prompt's text and the reply's, as the reply's ids spell it
    tokens: tuple[int, ...]


class TurnMemory:
    """The last few (prompt + reply) turns. Several, not one: a comparison runs two replies on one prompt,
    and the chat keeps whichever the user keeps; the longest one the new prompt's text starts with wins."""

    def __init__(self, size: int = 4) -> None:
        self._turns: deque[Turn] = deque(maxlen=size)

    def prompt(self, text: str, tokenize: Tokenize) -> list[int]:
        """`text`'s ids: a remembered turn's ids for the part of `text` it spells, the rest tokenized."""
        best = max((t for t in self._turns if text.startswith(t.text)), key=lambda t: len(t.text), default=None)
        if best is None:
            return tokenize(text, True)
        rest = text[len(best.text):]
        return [*best.tokens, *(tokenize(rest, False) if rest else ())]

    def remember(self, text: str, tokens: Sequence[int]) -> None:
        """`tokens` must spell `text` exactly (the caller checks); a turn already held becomes the newest."""
        turn = Turn(text, tuple(tokens))
        if turn in self._turns:
            self._turns.remove(turn)
        self._turns.append(turn)

    def clear(self) -> None:
        self._turns.clear()

    def __len__(self) -> int:
        return len(self._turns)

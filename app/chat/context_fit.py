"""Fitting a conversation into the model's context: what to leave out when it has grown too long.

The stored conversation is never shortened; only what the model reads is. The system prompt and the
newest prompt always stay; whole turns (a prompt and its reply) leave from the oldest, so the
history keeps alternating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

ChatMessages = list[dict[str, str]]


@dataclass(frozen=True)
class Fit:
    messages: ChatMessages
    prompt_tokens: int  # of the templated prompt that is sent
    dropped_turns: int  # user/assistant pairs left out, oldest first
    fits: bool  # False: even the system prompt and the newest prompt alone are too long


def reply_room(n_ctx: int, n_predict: int) -> int:
    """Tokens kept free for the reply: the limit, but never more than a quarter of the context."""
    return max(1, min(n_predict, n_ctx // 4))


def fit_messages(messages: Sequence[dict[str, str]], count: Callable[[ChatMessages], int], n_ctx: int,
                 room: int) -> Fit:
    """Drop the oldest turns until `count(messages) + room <= n_ctx`. `count` tokenizes a history."""
    msgs = list(messages)
    head = msgs[:1] if msgs and msgs[0]["role"] == "system" else []
    body = msgs[len(head):]
    dropped = 0
    used = count(head + body)
    while used + room > n_ctx and len(body) > 1:
        # A turn is a user message and what follows it up to the next user message.
        cut = next((i for i in range(1, len(body)) if body[i]["role"] == "user"), len(body) - 1)
        body = body[cut:]
        dropped += 1
        used = count(head + body)
    return Fit(head + body, used, dropped, used + room <= n_ctx)

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
                 room: int, left_out: int = 0) -> Fit:
    """Drop the oldest turns until `count(messages) + room <= n_ctx`. `count` tokenizes a history.

    left_out: the turns this chat's last fit left out. They stay out while the rest fits, so the prompt starts
    as the last one did and the model's cached prefix serves again: the reply waits for the new turn's
    processing, not the whole history's (on a 2-core CPU about 30 s for 3,000 tokens, every turn, were the
    history shifted by one turn each time). When more must go, turns leave until the history takes at most half
    of the space it may use, as llama.cpp's context shift (and Ollama's) discards half: the next turns then fit
    again without another full re-processing."""
    msgs = list(messages)
    head = msgs[:1] if msgs and msgs[0]["role"] == "system" else []
    body = msgs[len(head):]
    dropped = 0
    while dropped < left_out and len(body) > 1:
        body = _without_oldest_turn(body)
        dropped += 1
    used = count(head + body)
    goal = (n_ctx - room) // 2
    if left_out and used <= goal // 2:
        # Far below what a cut leaves: the chat lost turns since (deleted, edited back). Cut it anew.
        return fit_messages(messages, count, n_ctx, room)
    if used + room > n_ctx:
        while used > goal and len(body) > 1:
            body = _without_oldest_turn(body)
            dropped += 1
            used = count(head + body)
    return Fit(head + body, used, dropped, used + room <= n_ctx)


def _without_oldest_turn(body: ChatMessages) -> ChatMessages:
    """A turn is a user message and what follows it up to the next user message."""
    cut = next((i for i in range(1, len(body)) if body[i]["role"] == "user"), len(body) - 1)
    return body[cut:]

"""A conversation as Markdown or JSON, for `specchat chats export` and the window's Export.

The JSON is the conversation without the per-token fate records (those are the app's own display
data and can be tens of thousands of entries): id, title, times, system prompt, and each message's
role, content, status, mode, models and statistics.
"""

from __future__ import annotations

import json
import time
from typing import Any

from app.chat.conversations import Conversation, Message

FORMATS = ("md", "json")
EXPORT_KEYS = ("role", "content", "created", "status", "mode", "models", "sampling", "system", "error", "stats")
ROLE_HEADINGS = {"user": "You", "assistant": "Assistant", "system": "System"}


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


SAMPLING_NAMES = {"greedy": "greedy", "recommended": "recommended sampling", "custom": "custom sampling"}


def message_meta(message: Message) -> str:
    """What made an assistant's reply: mode, sampling, models, comparison (the window's grey line)."""
    if message.role != "assistant":
        return ""
    parts = [f"mode {message.mode}"] if message.mode else []
    preset = (message.sampling or {}).get("preset")
    if preset:
        parts.append(SAMPLING_NAMES.get(preset, str(preset)))
    models = message.models or {}
    if models.get("target"):
        parts.append(str(models["target"]) + (f" + {models['draft']}" if models.get("draft") else ""))
    if message.compare and message.compare.get("speedup"):
        parts.append(f"×{message.compare['speedup']:.2f} vs plain")
    return " · ".join(parts)


def message_summary(message: Message) -> str:
    """The line under an assistant heading: what made it (as the window's meta line), then speed."""
    meta = message_meta(message)
    parts = [meta] if meta else []
    stats = message.stats or {}
    if stats.get("n_tokens"):
        parts.append(f"{stats['n_tokens']} tokens at {stats.get('tokens_per_second', 0.0):.1f} tok/s")
    if message.status in ("error", "interrupted"):
        parts.append(message.status + (f": {message.error}" if message.error else ""))
    return " · ".join(parts)


def to_markdown(conv: Conversation, default_system: str = "") -> str:
    lines = [f"# {conv.title}", "", f"*{_stamp(conv.created)} · {len(conv.messages)} messages · SpecChat*", ""]
    system = conv.system_prompt(default_system).strip()
    if system:
        lines += ["## System", "", system, ""]
    for message in conv.messages:
        lines += [f"## {ROLE_HEADINGS.get(message.role, message.role)}", ""]
        summary = message_summary(message) if message.role == "assistant" else ""
        if summary:
            lines += [f"*{summary}*", ""]
        lines += [message.content.rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(conv: Conversation, default_system: str = "") -> str:
    data: dict[str, Any] = {
        "id": conv.id,
        "title": conv.title,
        "created": conv.created,
        "updated": conv.updated,
        "system": conv.system_prompt(default_system),
        "messages": [
            {k: v for k in EXPORT_KEYS if (v := getattr(message, k)) is not None} for message in conv.messages
        ],
    }
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def export(conv: Conversation, fmt: str, default_system: str = "") -> str:
    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return to_markdown(conv, default_system) if fmt == "md" else to_json(conv, default_system)

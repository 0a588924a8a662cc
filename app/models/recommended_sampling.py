"""A model's recommended sampling: from its GGUF, else from the catalogue of families, else a chat default.

llama.cpp reads `general.sampling.*` keys (temp, top_k, top_p, min_p, penalty_last_n, penalty_repeat)
as the defaults of a model whose GGUF carries them; few files do (none of the demo pair), so a small
catalogue holds what the model makers publish for their instruct models (their generation_config.json
or model card), and a chat default, close to Ollama's and LM Studio's, covers the rest. Keys found in
the GGUF override the catalogue entry field by field, as they override llama.cpp's defaults.

Hugging Face's repetition_penalty counts the whole sequence; here, as in llama.cpp, the repeat penalty
counts the last `repeat_last_n` (64) tokens.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from app.models.gguf_meta import GGUFError, GGUFInfo, read_gguf


@dataclass(frozen=True, slots=True)
class SamplingValues:
    """Sampling settings without a seed; field names are app.engine.sampling.SamplingParams's. The
    defaults are llama.cpp's (common.h), which also fill what a model maker does not specify."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Recommendation:
    values: SamplingValues
    source: str  # for people: where the values come from

    def to_json(self) -> dict[str, Any]:
        return {**self.values.as_dict(), "source": self.source}


# What a chat gets when neither the GGUF nor the catalogue knows the model: llama.cpp's chain
# (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8) with the mild repeat penalty that Ollama and
# LM Studio add (1.1 over the last 64 tokens), which stops a small model repeating a paragraph.
CHAT_DEFAULT = SamplingValues(repeat_penalty=1.1)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    pattern: str  # searched (case-insensitively) in the GGUF's general.basename, general.name and file name
    values: SamplingValues
    source: str


# First match wins: more specific names first. What the maker does not give keeps llama.cpp's default.
FAMILIES: tuple[Family, ...] = (
    Family("DeepSeek-R1 distill", r"deepseek-?r1", SamplingValues(temperature=0.6, top_p=0.95),
           "DeepSeek-R1's usage recommendations"),
    Family("Qwen3", r"qwen3", SamplingValues(temperature=0.6, top_k=20, top_p=0.95, min_p=0.0),
           "Qwen3's recommendation for thinking mode"),
    Family("Qwen2.5", r"qwen2", SamplingValues(temperature=0.7, top_k=20, top_p=0.8, repeat_penalty=1.05),
           "Qwen2/Qwen2.5's generation_config.json"),
    Family("Llama 3", r"llama[-_ ]?3", SamplingValues(temperature=0.6, top_p=0.9),
           "Llama 3's generation_config.json"),
    Family("Gemma 3", r"gemma[-_ ]?3", SamplingValues(temperature=1.0, top_k=64, top_p=0.95, min_p=0.0),
           "the Gemma team's recommendation"),
    Family("SmolLM2", r"smollm2", SamplingValues(temperature=0.2, top_p=0.9),
           "SmolLM2-Instruct's model card"),
)

# general.sampling.* key -> field (the keys llama.cpp's common/arg.cpp reads; mirostat is not supported here).
GGUF_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repeat_penalty",
    "general.sampling.penalty_last_n": "repeat_last_n",
}
# The values llama.cpp would accept: anything else in a file is ignored, not passed on.
_VALID = {
    "temperature": lambda v: 0.0 <= v <= 100.0,
    "top_k": lambda v: v >= 0,
    "top_p": lambda v: 0.0 < v <= 1.0,
    "min_p": lambda v: 0.0 <= v < 1.0,
    "repeat_penalty": lambda v: 0.0 < v <= 100.0,
    "repeat_last_n": lambda v: v >= 0,
}
_INT_FIELDS = {"top_k", "repeat_last_n"}


def family_of(info: GGUFInfo) -> Family | None:
    meta = info.metadata
    text = " ".join(str(meta.get(key) or "") for key in ("general.basename", "general.name")) + " " + info.path.name
    for family in FAMILIES:
        if re.search(family.pattern, text, re.IGNORECASE):
            return family
    return None


def _gguf_values(info: GGUFInfo) -> dict[str, Any]:
    """The general.sampling.* keys the file carries, with sane values only (others are ignored)."""
    out: dict[str, Any] = {}
    for key, name in GGUF_KEYS.items():
        value = info.metadata.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value) or not _VALID[name](value):
            continue
        if name in _INT_FIELDS:
            if value == int(value):
                out[name] = int(value)
        else:
            out[name] = float(value)
    return out


def recommended(info: GGUFInfo | None) -> Recommendation:
    """The sampling to start a chat with on this target model."""
    if info is None:
        return Recommendation(CHAT_DEFAULT, "SpecChat's chat default")
    family = family_of(info)
    base, source = (family.values, family.source) if family else (CHAT_DEFAULT, "SpecChat's chat default")
    from_file = _gguf_values(info)
    if not from_file:
        return Recommendation(base, source)
    keys = ", ".join(sorted(from_file))
    return Recommendation(replace(base, **from_file), f"the GGUF's general.sampling keys ({keys}) over {source}")


def recommended_for(path: str | os.PathLike[str] | None) -> Recommendation:
    """`recommended` for a model file; an unreadable file gets the chat default (loading it will say why)."""
    if path is None:
        return recommended(None)
    try:
        return recommended(read_gguf(path))
    except GGUFError:
        return recommended(None)

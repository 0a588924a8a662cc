"""Can this draft speed up this target? Answered from metadata alone, before anything heavy loads.

The blocking rules are llama.cpp's (`common_speculative_are_compatible` in common/speculative.cpp):
same vocab type, same add_bos (and BOS id when it is added), same add_eos (and EOS id when added),
vocab sizes within 128, identical token text from id 5 up to the smaller vocab. On top of those the
doctor warns or informs about what lowers the speed-up without breaking exactness (issue 5). Every
finding is one sentence, shared by the picker dialog, `specchat check-pair` and the GUI banner.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.models.cache_kind import cache_kind, mtp_note
from app.models.gguf_meta import GGUFError, GGUFInfo, nextn_layers, read_gguf, read_token_bytes

Severity = Literal["blocks", "warns", "informs"]

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
MIN_SIZE_FACTOR = 3.0  # a draft less than 3x smaller than the target rarely pays for itself
USEFUL_RATIO = (1 / 10, 1 / 4)  # draft/target parameter ratio where speculation usually wins


@dataclass(frozen=True)
class Finding:
    """One sentence, without a final period: callers embed it ("...: {reason}. Pick ...")."""

    severity: Severity
    code: str  # stable identifier for tests and the GUI (e.g. "token-text", "vocab-size")
    message: str


@dataclass(frozen=True)
class PairReport:
    findings: tuple[Finding, ...]
    compatible: bool
    target: GGUFInfo | None = None
    draft: GGUFInfo | None = None
    size_ratio: float | None = None  # draft params / target params

    @property
    def reason(self) -> str | None:
        """The first blocking finding: what the dialog greys a draft out with."""
        return next((f.message for f in self.findings if f.severity == "blocks"), None)

    def by_severity(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    def to_json(self) -> dict[str, object]:
        return {
            "compatible": self.compatible,
            "reason": self.reason,
            "size_ratio": self.size_ratio,
            "target": str(self.target.path) if self.target else None,
            "draft": str(self.draft.path) if self.draft else None,
            "findings": [
                {"severity": f.severity, "code": f.code, "message": f.message} for f in self.findings
            ],
        }


def check_pair(target_path: str | os.PathLike[str], draft_path: str | os.PathLike[str]) -> PairReport:
    """Check a target/draft pair. Unreadable files become blocking findings, never exceptions."""
    infos: dict[str, GGUFInfo] = {}
    errors: list[Finding] = []
    for role, path in (("target", target_path), ("draft", draft_path)):
        try:
            infos[role] = read_gguf(path)
        except GGUFError as e:
            errors.append(Finding("blocks", f"unreadable-{role}", f"The {role} cannot be used: {e}"))
    if errors:
        return PairReport(tuple(errors), False, infos.get("target"), infos.get("draft"))
    tgt, dft = infos["target"], infos["draft"]
    order = {"blocks": 0, "warns": 1, "informs": 2}
    findings = sorted(_vocab_rules(tgt, dft) + _extras(tgt, dft), key=lambda f: order[f.severity])
    ratio = dft.n_params / tgt.n_params if tgt.n_params else None
    compatible = not any(f.severity == "blocks" for f in findings)
    return PairReport(tuple(findings), compatible, tgt, dft, ratio)


def _q(text: str) -> str:
    return repr(text)


def _vocab_rules(t: GGUFInfo, d: GGUFInfo) -> list[Finding]:
    out: list[Finding] = []
    if t.vocab_type != d.vocab_type:
        out.append(
            Finding(
                "blocks",
                "vocab-type",
                f"Tokenizer types differ: target {t.vocab_type} ({t.tokenizer_model}) vs "
                f"draft {d.vocab_type} ({d.tokenizer_model})",
            )
        )
    if t.add_bos != d.add_bos or (t.add_bos and t.bos_id != d.bos_id):
        out.append(
            Finding(
                "blocks",
                "bos",
                f"BOS handling differs: target adds BOS={t.add_bos} (id {t.bos_id}) vs "
                f"draft adds BOS={d.add_bos} (id {d.bos_id})",
            )
        )
    if t.add_eos != d.add_eos or (t.add_eos and t.eos_id != d.eos_id):
        out.append(
            Finding(
                "blocks",
                "eos",
                f"EOS handling differs: target adds EOS={t.add_eos} (id {t.eos_id}) vs "
                f"draft adds EOS={d.add_eos} (id {d.eos_id})",
            )
        )
    elif t.eos_id != d.eos_id:
        out.append(
            Finding(
                "warns",
                "eos-id",
                f"End-of-sequence tokens differ (target {t.eos_id}, draft {d.eos_id}): the draft "
                "may not predict the end of a reply",
            )
        )
    if abs(t.vocab_size - d.vocab_size) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        out.append(
            Finding(
                "blocks",
                "vocab-size",
                f"vocab sizes {t.vocab_size:,} vs {d.vocab_size:,} (at most "
                f"{SPEC_VOCAB_MAX_SIZE_DIFFERENCE} apart allowed)",
            )
        )
    elif t.vocab_size != d.vocab_size:
        out.append(
            Finding(
                "informs",
                "vocab-size",
                f"vocab sizes {t.vocab_size:,} vs {d.vocab_size:,}: within llama.cpp's tolerance "
                f"of {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}",
            )
        )
    mismatch = _first_token_mismatch(t, d)
    if mismatch is not None:
        i, a, b = mismatch
        out.append(Finding("blocks", "token-text", f"token {i:,} differs: {_q(a)} vs {_q(b)}"))
    return out


def _first_token_mismatch(t: GGUFInfo, d: GGUFInfo) -> tuple[int, str, str] | None:
    # Equal fingerprints mean byte-identical token lists: skip the 150k-entry comparison.
    if t.tokenizer_fingerprint == d.tokenizer_fingerprint and t.vocab_size == d.vocab_size:
        return None
    a, b = read_token_bytes(t.path), read_token_bytes(d.path)
    start, n = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(a), len(b))
    if a[start:n] == b[start:n]:
        return None
    for i in range(start, n):
        if a[i] != b[i]:
            return i, a[i].decode("utf-8", "replace"), b[i].decode("utf-8", "replace")
    return None


def family(architecture: str) -> str:
    """'qwen2' and 'qwen3moe' are both 'qwen': families share tokenizers more often than not."""
    m = re.match(r"[a-z]+", architecture.lower())
    return m.group(0) if m else architecture


def _extras(t: GGUFInfo, d: GGUFInfo) -> list[Finding]:
    out: list[Finding] = []
    if _same_file(t.path, d.path):
        return [
            Finding(
                "warns",
                "same-file",
                "Target and draft are the same file: every draft is accepted but nothing is gained",
            )
        ]
    if t.architecture == d.architecture:
        out.append(Finding("informs", "architecture", f"Both models are {t.architecture}"))
    elif family(t.architecture) == family(d.architecture):
        out.append(
            Finding(
                "informs",
                "architecture",
                f"Architectures {t.architecture} and {d.architecture} are from the same family",
            )
        )
    else:
        out.append(
            Finding(
                "warns",
                "architecture",
                f"Architectures differ ({t.architecture} vs {d.architecture}): models from different "
                "families rarely predict each other well",
            )
        )
    for role, info in (("target", t), ("draft", d)):
        kind = cache_kind(info)
        if kind.kind != "attention":  # the usual case goes without saying
            out.append(Finding("informs", f"cache-{role}", f"The {role} is {kind.describe(role)}"))
    if nextn_layers(t):
        out.append(Finding("informs", "mtp", mtp_note(t)))
    out.extend(_template_findings(t.chat_template, d.chat_template))
    if d.context_length < t.context_length:
        out.append(
            Finding(
                "warns",
                "context",
                f"The draft's context ({d.context_length:,} tokens) is shorter than the target's "
                f"({t.context_length:,}): speculation stops past {d.context_length:,} tokens",
            )
        )
    out.extend(_size_findings(t, d))
    return out


_MARKER = re.compile(r"<\|[^|<>\s]+\|>|<[A-Za-z_]+>|\[/?INST\]")


def _template_findings(a: str | None, b: str | None) -> list[Finding]:
    if (a or "") == (b or ""):
        return []
    if not a or not b:
        which = "target" if not a else "draft"
        return [
            Finding(
                "warns",
                "chat-template",
                f"The {which} has no chat template: its prompts are formatted for the other model, "
                "which lowers acceptance",
            )
        ]
    # Re-uploads often differ in a comment or the tool-call prose; only a different turn format hurts.
    same_markers = set(_MARKER.findall(a)) == set(_MARKER.findall(b))
    similarity = difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).ratio()
    if same_markers and similarity >= 0.9:
        return [
            Finding(
                "informs",
                "chat-template",
                "Chat templates differ only in details (same turn markers); acceptance is unaffected",
            )
        ]
    return [
        Finding(
            "warns",
            "chat-template",
            "Chat templates differ: the draft sees prompts formatted for another model, which "
            "lowers acceptance",
        )
    ]


def _size_findings(t: GGUFInfo, d: GGUFInfo) -> list[Finding]:
    if not t.n_params or not d.n_params:
        return []
    ratio = d.n_params / t.n_params
    sizes = f"{_params(d.n_params)} draft for a {_params(t.n_params)} target"
    if ratio >= 1:
        return [Finding("warns", "size", f"The draft is not smaller than the target ({sizes}); swap them?")]
    sizes += f" (1/{1 / ratio:.1f})"
    if ratio > 1 / MIN_SIZE_FACTOR:
        return [
            Finding(
                "warns",
                "size",
                f"The draft is less than {MIN_SIZE_FACTOR:.0f}x smaller than the target: {sizes}; "
                "each draft token costs too much of a target step to gain much",
            )
        ]
    low, high = USEFUL_RATIO
    if ratio < low:
        return [
            Finding(
                "informs",
                "size",
                f"A very small draft: {sizes}; cheap, but it may agree with the target less often",
            )
        ]
    note = "in" if ratio <= high else "near"
    return [Finding("informs", "size", f"{sizes}: {note} the useful range of 1/4 to 1/10")]


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

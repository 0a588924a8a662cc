"""The proposer interface: who puts tokens in front of the target, and what it learns back.

A proposer guesses how the reply goes on; the engine verifies the guess in one batched target pass and keeps the
longest prefix the target agrees with (app/engine/speculative.py). Proposers today: the draft model, n-gram lookup,
hybrid (app/engine/drafters.py) and none (plain decoding), and a request's predicted output wrapped around any of
them (app/engine/prediction.py); the engine asks them through the policy that governs them
(app/engine/draft_policy.py). A new one (MTP heads) implements `propose`, inherits the rest from `ProposerBase`,
and gets the governor, the verify, the rollback and exactness for free.

Exactness does not depend on what is proposed: a wrong guess costs verify rows, never a different reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from app.engine.sampling import Dist, SampleNoise, SamplingParams


@dataclass(frozen=True, slots=True)
class Proposal:
    """Tokens to verify after the context's last token, and what making them cost."""

    tokens: tuple[int, ...]
    q: tuple[Dist, ...] | None  # the distributions the tokens were sampled from (sampled runs)
    ms: float
    # Made without a model pass (an n-gram copy, also hybrid's): its time says nothing of what the draft model
    # costs per position, so the governor leaves it out of that estimate (Governor.observe).
    free: bool = False
    # The tokens a draft model decoded to catch up with a context that moved on without it (steps it sat out),
    # beyond the one or two every drafting step syncs, and their share of `ms`: a price of having been off,
    # not of drafting, which the governor keeps apart (Governor.observe).
    catch_up: int = 0
    catch_up_ms: float = 0.0
    # Set by the policy that asked (DraftPolicy): the K asked for, whether this is a long running copy judged
    # by the copy rules, and rows of padding after the tokens (SpecParams.steady_shapes).
    k: int = 0
    copy: bool = False
    pad: int = 0
    # Copied from a request's predicted output (app/engine/prediction.py): what the stats count as accepted and
    # rejected prediction tokens.
    predicted: bool = False
    head: bool = False  # drafted by the target's own MTP head (shown in its own colour)

    @property
    def rows(self) -> int:
        """Rows of the verify batch: the context's last token, the proposal, its padding."""
        return 1 + len(self.tokens) + self.pad


NO_PROPOSAL = Proposal((), None, 0.0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the target made of one verified proposal."""

    step: int
    proposal: Proposal
    accepted: int  # leading proposal tokens the target agreed with
    verify_ms: float  # the verify pass (rows: proposal.rows)


class Proposer(Protocol):
    mode: str  # the mode's name, as the stats report it
    costs_time: bool  # its proposals cost model passes, which the governor prices (False: near free)
    copies: bool  # whether propose_copy may return anything
    drafts: bool  # whether it proposes anything at all (False: plain decoding, the policy asks for nothing)

    @property
    def native_ms(self) -> float:
        """Time this proposer has spent inside llama_decode (0 for proposers without a model)."""

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        """Called once per reply before the first step, and run to its end unless the reply is stopped.

        A model proposer decodes the prompt's uncached tail a batch at a time and yields (done, total) tokens
        after each, so the engine reports progress and a Stop ends it between batches: on a CPU the draft's
        prefill of a 1.5k-token prompt took half as long as the target's (docs/BENCHMARKS.md, run 36).
        Proposers without a model index the context and yield nothing."""

    def propose(self, context: list[int], limit: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        """Up to `limit` tokens that may follow `context` (fewer, or none, when unsure)."""

    def propose_free(self, context: list[int], limit: int, sampling: SamplingParams) -> Proposal:
        """A proposal that costs nothing to make (an n-gram copy), or an empty one. The policy offers it to the
        governor as a probe while drafting is off."""

    def propose_copy(self, context: list[int], limit: int, sampling: SamplingParams, sure_run: int = 0) -> Proposal:
        """Up to `limit` tokens of a long running copy of earlier text, or an empty proposal. Such copies are
        right far more often than other proposals, so they pay at a K other drafts would lose at.
        sure_run > 0: only a copy that has agreed for sure_run tokens, cut before the next token the reply
        edited before (PromptLookup.running_copy): what the CPU verifies long."""

    def observe(self, outcome: Outcome) -> None:
        """The target's verdict on this proposer's last proposal."""


class ProposerBase:
    """Defaults for a proposer without a model of its own and without copies: no prefill, no free offers."""

    costs_time = False
    copies = False
    drafts = True

    @property
    def native_ms(self) -> float:
        return 0.0

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        return iter(())

    def propose_free(self, context: list[int], limit: int, sampling: SamplingParams) -> Proposal:
        return NO_PROPOSAL

    def propose_copy(self, context: list[int], limit: int, sampling: SamplingParams, sure_run: int = 0) -> Proposal:
        return NO_PROPOSAL

    def observe(self, outcome: Outcome) -> None:
        return None

"""Acceptance traces of the real demo pair, recorded on the CPU and carried to the GPU machine.

    python packaging/gpu_kit/traces.py [-n 160] [OUT.json]     # ~3 min on 2 cores

For each built-in bench prompt: the target's greedy reply (plain decoding), then, at every reply
position j, what each drafter would propose there given the true context:

* `draft`: whether the draft model's greedy next token equals the target's (one bit per position).
  A greedy draft from position j agrees for exactly as many tokens as the bits from j on are 1,
  because while it agrees it is fed the same tokens as the target: so any K can be replayed.
* `lookup`: the n-gram drafter's proposal there (up to 16 tokens): its length, how many of its
  tokens the target then wrote, and its match length (hybrid takes copies with a match >= 4).

Acceptance is a property of the pair and the text, not of the device, so `replay.py` combines these
with the GPU's measured costs into predicted speedups and the governor's decisions at GPU speed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from app.cli.bench import load_prompts
from app.engine.events import FinishEvent
from app.engine.ngram import PromptLookup
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams, SpecSession
from app.engine.speculative import SpecParams
from app.llama_backend import ContextConfig, LlamaContext
from app.models.demo_pair import demo_pair_paths

LOOKAHEAD = 16
DEFAULT_OUT = Path(__file__).parent / "acceptance_traces.json"


def record(session: SpecSession, prompt: list[int], n_predict: int) -> dict:
    plain = None
    for event in session.generate(prompt, GenParams(mode="none", n_predict=n_predict)):
        if isinstance(event, FinishEvent):
            plain = event
    assert plain is not None
    reply = list(plain.tokens)
    return {"n_prompt": len(prompt), "n_reply": len(reply),
            "draft_agree": _draft_bits(session, prompt, reply), "lookup": _lookup(prompt, reply)}


def _draft_bits(session: SpecSession, prompt: list[int], reply: list[int]) -> str:
    """'1' where the draft's greedy next token, given the true context, is the target's."""
    assert session.draft_model is not None
    ctx = LlamaContext(session.draft_model, ContextConfig(n_ctx=2048, n_threads=session.config.n_threads))
    try:
        ctx.decode(prompt[:-1], logits_for="none")
        seq = [prompt[-1], *reply[:-1]]  # row i predicts reply[i]
        bits = []
        for start in range(0, len(seq), 16):
            chunk = seq[start : start + 16]
            ctx.decode(chunk, logits_for="all")
            for i in range(len(chunk)):
                bits.append("1" if int(np.argmax(ctx.logits(i))) == reply[start + i] else "0")
        return "".join(bits)
    finally:
        ctx.close()


def _lookup(prompt: list[int], reply: list[int]) -> list[list[int]]:
    """[proposed, agreed, match] per reply position, as the engine's lookup drafter would see it."""
    lookup = PromptLookup()
    context = list(prompt)
    lookup.prepare(context)
    out = []
    for j in range(len(reply)):
        proposal = lookup.propose(context, LOOKAHEAD)
        if proposal is None or not proposal.tokens:
            out.append([0, 0, 0])
        else:
            lookup.commit(proposal)
            agreed = 0
            for a, b in zip(proposal.tokens, reply[j:], strict=False):
                if a != b:
                    break
                agreed += 1
            out.append([len(proposal.tokens), agreed, proposal.match])
        context.append(reply[j])
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("-n", "--n-predict", type=int, default=160)
    args = parser.parse_args(argv)
    pair = demo_pair_paths()
    if pair is None:
        print("traces: the demo pair is missing; run `specchat models fetch-demo`", file=sys.stderr)
        return 2
    started = time.time()
    traces = []
    with SpecSession(PairConfig(pair.target, pair.draft, n_ctx=2048, n_threads=2)) as session:
        for item in load_prompts(None):
            prompt = session.chat_prompt(item.chat())
            trace = record(session, prompt, min(args.n_predict, item.n_predict or args.n_predict))
            traces.append({"id": item.id, "kind": item.kind, **trace})
            print(f"{item.id}: {trace['n_reply']} tokens, draft agrees at "
                  f"{trace['draft_agree'].count('1') / max(trace['n_reply'], 1):.0%} of positions", flush=True)
    data = {
        "pair": {"target": pair.target.name, "draft": pair.draft.name,
                 "target_first_mib_sha256": _sha16(pair.target), "draft_first_mib_sha256": _sha16(pair.draft)},
        "recorded": time.strftime("%Y-%m-%d"),
        "how": "greedy; CPU build of llama-cpp-python (repack on), n_ctx 2048; see packaging/gpu_kit/traces.py",
        "lookahead": LOOKAHEAD,
        "spec_defaults": {"draft_max": SpecParams().draft_max},
        "traces": traces,
    }
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes) in {time.time() - started:.0f} s")
    return 0


def _sha16(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        h.update(f.read(1 << 20))  # the first MiB names the file well enough for a provenance note
    return h.hexdigest()[:16]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""One timed SpecChat bench run in a process of its own, as llama.cpp's tools run beside it.

Why: on some machines (seen on 2-core Xeon VMs, run 12 in docs/BENCHMARKS.md) a process decodes ~15% faster
while another process holds a gigabyte or more, whatever that memory is. The bench's llama.cpp runs are
always children of the bench process, which holds the loaded pair, so they got that placement and SpecChat's
in-process runs did not. A fresh child per timed run puts both sides in the same conditions: started by the
same parent, loading their own weights, one run each.

The parent writes a pickled `Request` to a file and reads back a pickled `Recorded` (both files live in
the bench's private temporary folder: pickle is only ever read from our own processes).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from app.engine.drafters import NEEDS_DRAFT
from app.engine.events import FinishEvent, StepEvent
from app.engine.pair_config import PairConfig
from app.engine.parting import Batch, layout
from app.engine.session import GenParams, SpecSession

STDERR_TAIL = 2000  # characters of a failed child's stderr quoted in the error


@dataclass(frozen=True)
class Request:
    config: PairConfig
    tokens: tuple[int, ...]
    params: GenParams
    warmup_tokens: tuple[int, ...]  # an untimed short run first: pages in weights, warms caches and clocks
    warmup_n_predict: int


@dataclass(frozen=True)
class Recorded:
    """A run's FinishEvent and its steps' batches (what rounding_check replays where the reply parted)."""

    finish: FinishEvent
    steps: tuple[Batch, ...]


def child_config(config: PairConfig, mode: str) -> PairConfig:
    """What a child loads: the draft only for modes that use it (llama-completion loads the target alone), and
    no second memory check (the parent's passed; the parent's own copy would be counted against the child)."""
    return replace(config, draft=config.draft if mode in NEEDS_DRAFT else None, force=True)


def child_command() -> list[str]:
    """How to start `specchat` again: the packaged app is its own executable, a Python install runs the module."""
    return [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "app.cli"]


def run_in_child(request: Request, workdir: Path, name: str, timeout_s: float) -> Recorded:
    """Run `request` in a fresh `specchat bench-run` and return what it recorded."""
    request_file, result_file = workdir / f"{name}.request.pkl", workdir / f"{name}.result.pkl"
    request_file.write_bytes(pickle.dumps(request))
    result_file.unlink(missing_ok=True)
    try:
        done = subprocess.run([*child_command(), "bench-run", str(request_file), str(result_file)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"a SpecChat bench run ({name}, mode {request.params.mode}) took longer than "
                           f"{timeout_s:.0f} s in its own process; raise --native-timeout") from exc
    if done.returncode != 0 or not result_file.exists():
        raise RuntimeError(f"a SpecChat bench run ({name}, mode {request.params.mode}) failed in its own process "
                           f"(exit status {done.returncode}); its error output ends with:\n"
                           f"{done.stderr[-STDERR_TAIL:]}")
    result = pickle.loads(result_file.read_bytes())
    if not isinstance(result, Recorded):
        raise RuntimeError(f"a SpecChat bench run ({name}) returned {type(result).__name__}, not a Recorded run")
    return result


def run_recorded(session: SpecSession, tokens: Sequence[int], params: GenParams) -> Recorded:
    """One reply, run to its FinishEvent, with its steps (the bench's runs, in its own process and in a child)."""
    steps: list[StepEvent] = []
    for event in session.generate(tokens, params):
        if isinstance(event, StepEvent):
            steps.append(event)
        elif isinstance(event, FinishEvent):
            return Recorded(event, layout(steps))
    raise RuntimeError("the engine ended without a FinishEvent")


def run_once(session: SpecSession, tokens: Sequence[int], params: GenParams) -> FinishEvent:
    """One reply, run to its FinishEvent."""
    return run_recorded(session, tokens, params).finish


def main(request_file: Path, result_file: Path) -> int:
    """`specchat bench-run REQUEST RESULT`: the child's side."""
    request = pickle.loads(request_file.read_bytes())
    assert isinstance(request, Request)
    with SpecSession(child_config(request.config, request.params.mode)) as session:
        run_once(session, request.warmup_tokens,
                replace(request.params, n_predict=request.warmup_n_predict, track_margins=False))
        session.clear_caches()  # as llama.cpp after its warm-up: the prompt is prefilled whole, not after a prefix
        result = run_recorded(session, request.tokens, request.params)
    result_file.write_bytes(pickle.dumps(result))
    return 0


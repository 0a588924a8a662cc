"""`specchat bench`: plain, lookup and draft decoding on the same prompts, interleaved, optionally beside
llama.cpp's own tools (`--native DIR`, see app/cli/native_bench.py).

Fairness: an untimed warm-up round runs every mode once on a short prompt; each round runs every mode
on a prompt back to back, and round r starts with mode r mod n, so no mode always runs first (cold
caches) or last (a hot CPU). The report quotes medians over rounds and ratios against `none` (and
llama.cpp's plain decoding) measured in the same round. Timed runs never track logit margins (about
1 ms a token): one extra untimed plain run per prompt does, and judges every divergence.

With `--native` each timed SpecChat run also gets a fresh process of its own (app/cli/bench_child.py), started
by the bench process as llama.cpp's runs are: both sides load their weights and run under the same conditions.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import json
import platform
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from app import settings as settings_mod
from app.atomic import atomic_write_text
from app.cli import native_bench, native_server, rounding_check
from app.cli.bench_child import Recorded, Request, run_in_child, run_once, run_recorded
from app.cli.native_bench import NATIVE_MODES, PREFIX, SERVER_MODES, NativeResult, NativeSettings
from app.cli.options import gen_params, pair_config, resolve_models
from app.cli.ratio_stats import ratio_interval
from app.engine.drafters import NEEDS_DRAFT
from app.engine.events import FinishEvent
from app.engine.pair_config import PairConfig
from app.engine.parting import Batch, first_divergence
from app.engine.session import GenParams, SpecSession
from app.engine.speculative import SpecParams
from app.models.gguf_meta import has_mtp_layers
from app.models.recommended_sampling import recommended_for

DEFAULT_N_PREDICT = 128
WARMUP_MESSAGES = ({"role": "user", "content": "Say hello in five words."},)
WARMUP_N_PREDICT = 16
ROLES = ("system", "user", "assistant")

MEASUREMENT = {
    "specchat": "tokens its decode steps produced (an end-of-turn token included, the first token, which comes "
                "from the prompt's pass, not) / wall time of the decode loop after prefill (drafting, "
                "verification, sampling and Python included)",
    "llama.cpp:plain": "llama-completion's llama_perf \"eval time = X ms / N runs\" and \"sampling time = S ms\": "
                       "N one-token decodes / (X + S) (prompt excluded; llama_decode alone: eval_rounds_tps)",
    "llama.cpp:server-plain": "llama-server's own timings of /completion, loaded once for the bench: "
                              "(predicted_n - 1) / predicted_ms, the prompt's end to the last token (its first token "
                              "comes from the prompt's pass)",
    "llama.cpp:speculative": "llama-speculative-simple's \"decoded N tokens in X seconds\": wall time of its "
                             "draft/verify loop after the prompt (its first batch holds the last prompt token)",
}


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    prompt: str  # the last user message (a single-turn row's whole prompt)
    kind: str = ""
    messages: tuple[tuple[str, str], ...] = ()  # (role, content); empty: one user turn holding `prompt`
    n_predict: int | None = None  # this row's token budget; -n on the command line overrides it

    def chat(self) -> list[dict[str, str]]:
        if not self.messages:
            return [{"role": "user", "content": self.prompt}]
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass
class BenchRun:
    prompt_id: str
    mode: str
    tokens: int
    tokens_per_second: float
    speedup: float
    acceptance_rate: float
    mean_accepted_length: float
    identical: bool | None  # None: the replies cannot be compared (sampled runs without the same random numbers)
    divergence: dict[str, Any] | None
    engine_overhead: float | None  # share of decode time spent outside llama_decode (Python: drafting logic,
    # verification, sampling, bookkeeping); None for llama.cpp's tools
    governor: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list, repr=False)
    rounds_tps: list[float] = field(default_factory=list)
    engine: str = "specchat"  # or "llama.cpp"
    kind: str = ""
    n_predict: int = 0
    prompt_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    finish_reason: str | None = None
    speedup_vs_llama_cpp: float | None = None  # median per-round ratio against llama.cpp's plain decoding
    governor_by_round: list[list[dict[str, Any]]] = field(default_factory=list)
    command: list[str] | None = None  # llama.cpp rows: the last round's exact command line
    # llama.cpp plain rows: the per-round rates of llama_decode alone (its own "eval" report, sampling left out)
    eval_rounds_tps: list[float] | None = None
    # The geometric mean of the per-round ratios to llama.cpp plain with its 95% interval, [low, mean, high]
    # (t on the log ratios): how far the rounds' noise leaves the ratio open. None with fewer than 2 rounds.
    vs_llama_cpp_interval: list[float] | None = None
    # With server-plain: the same against llama-server's plain decoding, loaded once for the bench
    speedup_vs_llama_server: float | None = None
    vs_llama_server_interval: list[float] | None = None


class BenchAddOn(Protocol):
    """One more section of the report, measured on the loaded pair after the timed runs (which it must not disturb:
    it runs untimed, after them). The product has none; tools/bench's research bench adds the copy bound this way."""

    @property
    def key(self) -> str: ...  # the report's key for the section

    def measure(self, session: SpecSession, prompts: Sequence[BenchPrompt], runs: Sequence[BenchRun],
                spec: SpecParams) -> dict[str, Any] | None: ...

    def format(self, section: dict[str, Any], runs: Sequence[BenchRun]) -> list[str]: ...


def _row_error(source: str, number: int, what: str) -> ValueError:
    return ValueError(f"{source}, line {number}: {what}")


def _parse_row(obj: Any, source: str, number: int) -> BenchPrompt:
    if not isinstance(obj, dict):
        raise _row_error(source, number, f"expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("id"), str | int) or str(obj.get("id")).strip() == "":
        raise _row_error(source, number, "missing \"id\" (a non-empty string)")
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise _row_error(source, number, "needs exactly one of \"prompt\" (a string) or \"messages\" (a list of "
                                         "{\"role\", \"content\"} objects)")
    kind = obj.get("kind", "")
    if not isinstance(kind, str):
        raise _row_error(source, number, "\"kind\" must be a string")
    n_predict = obj.get("n_predict")
    if n_predict is not None and (not isinstance(n_predict, int) or isinstance(n_predict, bool) or n_predict < 1):
        raise _row_error(source, number, f"\"n_predict\" must be a positive integer, got {n_predict!r}")
    if has_prompt:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise _row_error(source, number, "\"prompt\" must be a non-empty string")
        return BenchPrompt(str(obj["id"]), obj["prompt"], kind, (), n_predict)
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        raise _row_error(source, number, "\"messages\" must be a non-empty list of {\"role\", \"content\"} objects")
    pairs = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise _row_error(source, number, f"messages[{i}] must be an object with a string \"content\"")
        if msg.get("role") not in ROLES:
            raise _row_error(source, number, f"messages[{i}] has role {msg.get('role')!r}: use one of "
                                             f"{', '.join(ROLES)}")
        pairs.append((str(msg["role"]), str(msg["content"])))
    if pairs[-1][0] != "user":
        raise _row_error(source, number, "the last message must be the user's (the bench generates the reply)")
    return BenchPrompt(str(obj["id"]), pairs[-1][1], kind, tuple(pairs), n_predict)


def jsonl_rows(path: Path | None, built_in: str, what: str, built_in_name: str) -> tuple[str, list[tuple[int, Any]]]:
    """(source, [(line number, parsed row)]) of a JSONL file, or of app/data/`built_in` when `path` is None; blank
    lines skipped. A file that cannot be read or a line that is not JSON: ValueError naming it (`what`: "prompts")."""
    if path is None:
        text = importlib.resources.files("app").joinpath(f"data/{built_in}").read_text(encoding="utf-8")
        source = built_in_name
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"Cannot read the {what} file {path}: {exc.strerror}") from exc
        source = str(path)
    rows: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise _row_error(source, number, f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    return source, rows


def load_prompts(path: Path | None) -> list[BenchPrompt]:
    """JSONL rows {"id", "kind"?, "n_predict"?} with either "prompt" or "messages"; errors name the line."""
    source, rows = jsonl_rows(path, "bench_prompts.jsonl", "prompts", "the built-in suite")
    prompts: list[BenchPrompt] = []
    seen: dict[str, int] = {}
    for number, obj in rows:
        item = _parse_row(obj, source, number)
        if item.id in seen:
            raise _row_error(source, number, f"id {item.id!r} repeats line {seen[item.id]}")
        seen[item.id] = number
        prompts.append(item)
    if not prompts:
        raise ValueError(f"{source} holds no prompts")
    return prompts


def round_order(modes: Sequence[str], r: int) -> list[str]:
    """Round r starts with mode r mod n and keeps the cyclic order."""
    start = r % len(modes)
    return list(modes[start:]) + list(modes[:start])


def chat_text(session: SpecSession, messages: Sequence[dict[str, Any]]) -> str:
    """The templated prompt as text, exactly as `SpecSession.chat_prompt` renders it before tokenizing."""
    from app.models import chat_template

    model = session.target_model
    return chat_template.render(model.chat_template(), messages,
                                bos=model.token_text(model.bos) if model.bos >= 0 else "",
                                eos=model.token_text(model.eos) if model.eos >= 0 else "")


@dataclass
class NativePlan:
    """llama.cpp's side of a bench: its settings, modes and a folder for the prompt files."""

    settings: NativeSettings
    modes: list[str]  # NATIVE_MODES names; "plain" always first
    workdir: Path
    system_info: str | None = None  # llama-completion's build features, from its last run
    server: native_server.NativeServer | None = None  # started at server-plain's first run, closed by close()

    def run(self, mode: str, session: SpecSession, messages: Sequence[dict[str, Any]], tokens: list[int],
            n_predict: int, name: str) -> NativeResult:
        if mode in SERVER_MODES:
            return self._serve(mode, tokens, n_predict)
        text = chat_text(session, messages)
        prompt_file = self.workdir / f"{name}.txt"
        native_bench.write_prompt(prompt_file, text)
        result = native_bench.run(mode, self.settings, prompt_file, n_predict, text, len(tokens))
        if mode == "plain":
            native_bench.check_prompt_tokens(tokens, result.prompt_tokens)
            self.system_info = result.system_info
        return result

    def _serve(self, mode: str, tokens: list[int], n_predict: int) -> NativeResult:
        if self.server is None:
            self.server = native_server.NativeServer(self.settings, self.workdir)
        return self.server.complete(mode, tokens, n_predict)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


@dataclass
class FreshProcesses:
    """Timed SpecChat runs each in a process of their own (`--processes fresh`)."""

    config: PairConfig
    workdir: Path
    timeout_s: float
    warmup_tokens: tuple[int, ...]

    def run(self, tokens: list[int], params: GenParams, name: str) -> Recorded:
        request = Request(self.config, tuple(tokens), params, self.warmup_tokens, WARMUP_N_PREDICT)
        return run_in_child(request, self.workdir, name, self.timeout_s)


Result = FinishEvent | NativeResult


def _tps(r: Result) -> float:
    return r.stats.tokens_per_second if isinstance(r, FinishEvent) else r.tokens_per_second


def _ratios(runs: list[Result], base: list[Result]) -> list[float]:
    return [_tps(r) / _tps(b) for r, b in zip(runs, base, strict=True) if _tps(b) > 0]


def _governor_events(run: FinishEvent) -> list[dict[str, Any]]:
    return [{"step": g.step, "action": g.action, "k_before": g.k_before, "k_after": g.k_after, "reason": g.reason,
             "scope": g.scope}
            for g in run.stats.governor]


def warm_up(session: SpecSession, params: GenParams, modes: Sequence[str], native: NativePlan | None) -> None:
    """One untimed run of every mode on a short prompt: page the weights in, warm caches and clocks."""
    messages = [dict(m) for m in WARMUP_MESSAGES]
    tokens = session.chat_prompt(messages)
    p = replace(params, n_predict=min(WARMUP_N_PREDICT, params.n_predict), track_margins=False)
    for mode in modes:
        run_once(session, tokens, p.with_mode(mode))
    if native is not None:
        for mode in native.modes:
            native.run(mode, session, messages, tokens, p.n_predict, "warmup")


def bench(session: SpecSession, prompts: list[BenchPrompt], params: GenParams, modes: list[str],
          repeat: int = 3, progress: Any = None, native: NativePlan | None = None, warmup: bool = False,
          fixed_n_predict: bool = True, fresh: FreshProcesses | None = None) -> Iterator[BenchRun]:
    """Yield one BenchRun per prompt and mode (none first, llama.cpp's last), medians over `repeat` rounds.

    `fixed_n_predict`: params.n_predict applies to every prompt; otherwise a row's own n_predict wins.
    `fresh`: timed SpecChat runs each in a new process (which warms itself up); `session` still renders the
    prompts and makes the untimed reference run.
    """
    modes = ["none"] + [m for m in modes if m != "none"]
    native_names = [PREFIX + m for m in native.modes] if native else []
    all_modes = modes + native_names
    if warmup:
        warm_up(session, params, [] if fresh else modes, native)
        if progress is not None:
            progress.update(len(all_modes))
    # Greedy replies must equal plain decoding's (or part at a near-tie); seeded sampled ones too, since coupled
    # sampling gives the same reply whatever the drafts. Without a seed each run draws its own random numbers.
    compare = "greedy" if params.sampling.greedy else "seeded" if params.sampling.seed is not None else None
    for item in prompts:
        messages = item.chat()
        tokens = session.chat_prompt(messages)
        n = params.n_predict if fixed_n_predict or item.n_predict is None else item.n_predict
        p = replace(params, n_predict=n, track_margins=False)
        # Margins cost about 1 ms a token, so only this untimed plain run tracks them. It prefills the whole
        # prompt, as llama.cpp's runs and the fresh processes do (a cached prefix can round the first token apart).
        session.clear_caches()
        reference = run_once(session, tokens, replace(p, mode="none", track_margins=True))
        if progress is not None:
            progress.update(1)
        results: dict[str, list[Result]] = {m: [] for m in all_modes}
        steps: dict[str, tuple[Batch, ...]] = {}  # each SpecChat mode's last run, for rounding_check's replay
        for r in range(repeat):
            for mode in round_order(all_modes, r):
                if mode.startswith(PREFIX):
                    assert native is not None
                    results[mode].append(native.run(mode.removeprefix(PREFIX), session, messages, tokens, n, item.id))
                else:
                    recorded = (fresh.run(tokens, p.with_mode(mode), f"{item.id}-{mode}-{r}") if fresh is not None
                                else run_recorded(session, tokens, p.with_mode(mode)))
                    results[mode].append(recorded.finish)
                    steps[mode] = recorded.steps
                if progress is not None:
                    progress.update(1)
        cpp_plain = results.get(PREFIX + "plain")
        server_plain = results.get(PREFIX + "server-plain")
        for mode in all_modes:
            runs = results[mode]
            vs_cpp = _ratios(runs, cpp_plain) if cpp_plain else None
            vs_server = _ratios(runs, server_plain) if server_plain else None
            common = {"prompt_id": item.id, "mode": mode, "kind": item.kind, "n_predict": n,
                      "prompt_tokens": len(tokens), "tokens_per_second": statistics.median(_tps(r) for r in runs),
                      "speedup": statistics.median(_ratios(runs, results["none"]) or [0.0]),
                      "speedup_vs_llama_cpp": statistics.median(vs_cpp or [0.0]) if vs_cpp is not None else None,
                      "rounds_tps": [_tps(r) for r in runs],
                      "vs_llama_cpp_interval": ratio_interval(vs_cpp) if vs_cpp is not None else None,
                      "speedup_vs_llama_server": statistics.median(vs_server) if vs_server else None,
                      "vs_llama_server_interval": ratio_interval(vs_server) if vs_server else None}
            if mode in native_names:
                yield _native_run(common, [r for r in runs if isinstance(r, NativeResult)], reference,
                                  compare == "greedy")
            else:
                run = _specchat_run(common, [r for r in runs if isinstance(r, FinishEvent)], reference, compare)
                yield _with_rounding_check(run, session, tokens, reference, steps.get(mode, ()))


def _with_rounding_check(run: BenchRun, session: SpecSession, tokens: list[int], reference: FinishEvent,
                         steps: Sequence[Batch] = ()) -> BenchRun:
    """A parting that is not a near-tie gets the target's gaps at that position measured (rounding_check), in the
    speculative run's own batches too when its `steps` are given."""
    d = run.divergence
    if not d or d.get("near_tie") or d.get("sampled") or d.get("plain_token", -1) < 0 or d.get("spec_token", -1) < 0:
        return run  # (the check replays argmax choices: a sampled parting is not one)
    check = rounding_check.measure(session, tokens, reference.tokens, d["position"], d["plain_token"],
                                   d["spec_token"], steps)
    return replace(run, divergence={**d, "rounding": asdict(check)})


def _specchat_run(common: dict[str, Any], runs: list[FinishEvent], reference: FinishEvent,
                  compare: str | None) -> BenchRun:
    """compare: "greedy" or "seeded" (the reply must be the reference's), None (not comparable)."""
    last = runs[-1]
    div = first_divergence(reference, last) if compare else None
    divergence = asdict(div) if div else None
    if divergence and compare == "seeded":
        # A top-two logit margin says nothing of how near the coupled race was: no near-tie label here.
        divergence = {**divergence, "sampled": True, "near_tie": False}
    overheads = [r.stats.python_ms / r.stats.decode_ms for r in runs if r.stats.decode_ms > 0]
    return BenchRun(
        **common,
        tokens=last.stats.n_tokens,
        acceptance_rate=last.stats.acceptance_rate,
        mean_accepted_length=last.stats.mean_accepted_length,
        identical=div is None if compare else None,
        divergence=divergence,
        engine_overhead=statistics.median(overheads) if overheads else 0.0,
        governor=[f"step {g.step}: {'copy ' if g.scope == 'copy' else ''}{g.action}" for g in last.stats.governor],
        token_ids=list(last.tokens),
        drafted=last.stats.drafted,
        accepted=last.stats.accepted,
        finish_reason=last.stats.finish_reason,
        governor_by_round=[_governor_events(r) for r in runs],
    )


def _native_run(common: dict[str, Any], runs: list[NativeResult], reference: FinishEvent, greedy: bool) -> BenchRun:
    last = runs[-1]
    # llama.cpp prints text, not token ids: greedy replies are compared as text, as far as both go. Sampled, it
    # draws its own random numbers, so its reply is not SpecChat's.
    same = native_bench.same_reply(reference.text, last.text) if greedy else None
    divergence = None if same is not False else {"text_differs": True, "reply_text_known": last.text is not None}
    return BenchRun(
        **common,
        tokens=last.n_tokens,
        acceptance_rate=last.n_accepted / last.n_drafted if last.n_drafted else 0.0,
        mean_accepted_length=0.0,
        identical=same,
        divergence=divergence,
        engine_overhead=None,
        engine="llama.cpp",
        drafted=last.n_drafted,
        accepted=last.n_accepted,
        command=list(last.command),
        eval_rounds_tps=([r.eval_tokens_per_second for r in runs if r.eval_tokens_per_second is not None]
                         or None),
    )


def machine_description() -> dict[str, Any]:
    import psutil

    from app.llama_backend import supports_gpu_offload

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_logical": psutil.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu_offload": supports_gpu_offload(),
        "python": platform.python_version(),
    }


def summarise(runs: list[BenchRun]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in dict.fromkeys(r.mode for r in runs):
        mine = [r for r in runs if r.mode == mode]
        overheads = [r.engine_overhead for r in mine if r.engine_overhead is not None]
        vs_cpp = [r.speedup_vs_llama_cpp for r in mine if r.speedup_vs_llama_cpp is not None]
        vs_server = [r.speedup_vs_llama_server for r in mine if r.speedup_vs_llama_server is not None]
        drafted = sum(r.drafted for r in mine)
        out[mode] = {
            "engine": mine[0].engine,
            "median_tokens_per_second": statistics.median(r.tokens_per_second for r in mine),
            "median_speedup": statistics.median(r.speedup for r in mine),
            "min_speedup": min(r.speedup for r in mine),
            "identical": sum(bool(r.identical) for r in mine),
            "prompts": len(mine),
            "compared": sum(r.identical is not None for r in mine),  # prompts whose reply could be compared
            "median_engine_overhead": statistics.median(overheads) if overheads else None,
            "median_speedup_vs_llama_cpp": statistics.median(vs_cpp) if vs_cpp else None,
            # The per-prompt spread: for llama.cpp:plain-again (the A/A control) it is the machine's noise floor.
            "min_speedup_vs_llama_cpp": min(vs_cpp) if vs_cpp else None,
            "max_speedup_vs_llama_cpp": max(vs_cpp) if vs_cpp else None,
            "median_speedup_vs_llama_server": statistics.median(vs_server) if vs_server else None,
            "min_speedup_vs_llama_server": min(vs_server) if vs_server else None,
            "drafted": drafted,
            "accepted": sum(r.accepted for r in mine),
            "acceptance_rate": sum(r.accepted for r in mine) / drafted if drafted else 0.0,
        }
    return out


def _native_plan(args: argparse.Namespace, cfg: Any, params: GenParams, workdir: Path) -> NativePlan | None:
    if args.native is None:
        return None
    native_bench.tool_paths(args.native)
    wanted = [m.strip() for m in args.native_modes.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in NATIVE_MODES]
    if unknown:
        raise ValueError(f"--native-modes: unknown {', '.join(unknown)}; use some of {', '.join(NATIVE_MODES)}")
    if set(wanted) & set(SERVER_MODES):
        native_server.check_tool(args.native)
    modes = ["plain"] + [m for m in dict.fromkeys(wanted) if m != "plain"]
    if "draft-simple" in modes and cfg.draft is None:
        modes.remove("draft-simple")
        print("specchat: note: no draft model, so llama.cpp's draft-simple is skipped", file=sys.stderr)
    if "draft-mtp" in modes and not has_mtp_layers(cfg.target):
        modes.remove("draft-mtp")
        print("specchat: note: the target has no MTP head, so llama.cpp's draft-mtp is skipped", file=sys.stderr)
    settings = native_settings(Path(args.native), cfg, params, args.native_timeout,
                               native_bench.split_args(args.native_args or ""))
    return NativePlan(settings, modes, workdir)


def native_settings(bin_dir: Path, cfg: PairConfig, params: GenParams, timeout_s: float,
                    extra_args: tuple[str, ...] = ()) -> NativeSettings:
    """llama.cpp's side of a comparison: the pair's files, context, threads and kernels, and the same sampling."""
    from app.llama_backend import default_threads

    s = params.sampling
    return NativeSettings(
        bin_dir=bin_dir, target=cfg.target, draft=cfg.draft, n_ctx=cfg.n_ctx,
        n_threads=cfg.n_threads or default_threads(), n_batch=cfg.n_batch, flash_attn=cfg.flash_attn,
        repack=cfg.repack, n_gpu_layers=cfg.n_gpu_layers, n_gpu_layers_draft=cfg.n_gpu_layers_draft,
        type_k=cfg.type_k, type_v=cfg.type_v, temp=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
        seed=s.seed, draft_max=params.spec.draft_max, p_min=params.spec.p_min,
        timeout_s=timeout_s, extra_args=extra_args,
        repeat_penalty=s.repeat_penalty, repeat_last_n=s.repeat_last_n, frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty, n_threads_draft=cfg.n_threads_draft,
    )


def run_bench_cli(args: argparse.Namespace, add_ons: Sequence[BenchAddOn] = ()) -> int:
    """`specchat bench`; `add_ons`: report sections measured after the runs (see BenchAddOn)."""
    from tqdm import tqdm

    if args.repeat < 1:
        raise ValueError("--repeat must be at least 1")
    settings, _warning = settings_mod.load()
    prompts = load_prompts(args.prompts)
    target, draft = resolve_models(args, settings)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in [m for m in modes if m in NEEDS_DRAFT and draft is None]:
        modes.remove(mode)
        print(f"specchat: note: no draft model, so the {mode} mode is skipped", file=sys.stderr)
    # Greedy unless --sampling or a sampling flag says otherwise: the bench checks exactness against plain.
    params = gen_params(args, settings, draft is not None, recommended_for(target).values, preset="greedy")
    params = GenParams(params.mode, args.n_predict or DEFAULT_N_PREDICT, params.sampling, params.spec)
    cfg = pair_config(args, settings, target, draft)
    runs: list[BenchRun] = []
    reference: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="specchat-bench-") as tmp, contextlib.ExitStack() as cleanup:
        native = _native_plan(args, cfg, params, Path(tmp))  # checks the tools before any model loads
        if native:
            cleanup.callback(native.close)  # a llama-server of server-plain, before its log's folder goes
        processes = args.processes if args.processes != "auto" else "fresh" if native else "shared"
        with SpecSession(cfg) as session:
            spec_used = session.resolve_spec(params.spec)  # "auto" values as this machine runs them
            fresh = (FreshProcesses(cfg, Path(tmp), args.native_timeout, tuple(session.chat_prompt(WARMUP_MESSAGES)))
                     if processes == "fresh" else None)
            n_modes = len(set(modes) | {"none"}) + (len(native.modes) if native else 0)
            total = len(prompts) * (1 + n_modes * args.repeat) + (0 if args.no_warmup else n_modes)
            with tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=None) as bar:
                for run in bench(session, prompts, params, modes, args.repeat, bar, native, not args.no_warmup,
                                 fixed_n_predict=args.n_predict is not None, fresh=fresh):
                    runs.append(run)
            if args.compare_llama_cpp_python:
                reference = _reference_lookup(session, prompts, params, cfg)
            sections = {a.key: a.measure(session, prompts, runs, spec_used) for a in add_ons}
    report = {
        "machine": machine_description(),
        "models": {"target": str(target), "draft": str(draft) if draft else None},
        "settings": {"n_predict": params.n_predict, "sampling": asdict(params.sampling),
                     "spec": asdict(spec_used), "n_ctx": cfg.n_ctx, "n_threads": cfg.n_threads,
                     "n_threads_draft": cfg.n_threads_draft, "flash_attn": cfg.flash_attn, "repeat": args.repeat,
                     "repack": cfg.repack,
                     "n_batch": cfg.n_batch, "warmup": not args.no_warmup,
                     "n_predict_source": "-n for every prompt" if args.n_predict else
                     f"each prompt's n_predict, else {DEFAULT_N_PREDICT}",
                     "mode_order": "rotated: round r starts with mode r mod n",
                     "processes": processes,
                     "margins": "from one untimed plain run per prompt"},
        "measurement": MEASUREMENT,
        "runs": [{k: v for k, v in asdict(r).items() if k != "token_ids"} for r in runs],
        "summary": summarise(runs),
    }
    if native:
        from app.llama_backend import system_info

        ours = native_bench.normalise_system_info(system_info())
        report["native"] = {"bin_dir": str(native.settings.bin_dir), "modes": native.modes,
                            "version": native_bench.tool_version(native.settings.bin_dir),
                            "n_threads": native.settings.n_threads, "repack": native.settings.repack,
                            "prompt_tokens_checked": True, "system_info": native.system_info,
                            "specchat_system_info": ours, "same_build_features": native.system_info == ours}
    if reference:
        report["llama_cpp_python_prompt_lookup"] = reference
    report.update({key: section for key, section in sections.items() if section})
    text = json.dumps(report, indent=2)
    if args.json_out is not None:
        atomic_write_text(args.json_out, text + "\n")
    if args.json:
        print(text)
    else:
        print(format_report(runs, report, add_ons))
    return 0


def _reference_lookup(session: SpecSession, prompts: list[BenchPrompt], params: GenParams,
                      cfg: Any) -> dict[str, dict[str, float]]:
    """llama-cpp-python's own LlamaPromptLookupDecoding on the same prompts, for comparison."""
    from app.llama_backend import reference_prompt_lookup_tps

    tokenized = {p.id: session.chat_prompt(p.chat()) for p in prompts}
    return reference_prompt_lookup_tps(cfg.target, tokenized, params.n_predict, cfg.n_ctx, cfg.n_threads)


def _same_column(r: BenchRun) -> str:
    if r.identical is None:
        return "n/a (sampled: own random numbers)" if r.engine != "specchat" else "n/a (sampled without --seed)"
    if r.identical:
        return "yes"
    d = r.divergence or {}
    if d.get("sampled"):
        return f"no @{d.get('position')} (sampled with the same seed: the coupled race chose another token)"
    if r.engine != "specchat":
        return "no (reply text differs)" if d.get("reply_text_known", True) else "unknown (reply not found)"
    rounding = d.get("rounding")
    if rounding and rounding.get("reproduced"):
        return (f"no @{d.get('position')} (the target's own choice in the run's batches: margin "
                f"{d.get('margin', float('nan')):.4f} one token at a time, "
                f"{rounding['gaps']['engine_batches']:+.4f} replayed)")
    if rounding and rounding.get("reproduced") is False:
        return (f"no @{d.get('position')} (REAL DIFFERENCE: margin {d.get('margin', float('nan')):.4f}, not "
                f"reproduced by replaying the run's batches)")
    if rounding and rounding["within"]:
        return (f"no @{d.get('position')} (within measured rounding: margin {d.get('margin', float('nan')):.4f}, "
                f"the gap moves {rounding['spread']:.4f} with the batch)")
    kind = "near-tie" if d.get("near_tie") else "REAL DIFFERENCE"
    return f"no @{d.get('position')} ({kind}, margin {d.get('margin', float('nan')):.4f})"


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def format_report(runs: list[BenchRun], report: dict[str, Any], add_ons: Sequence[BenchAddOn] = ()) -> str:
    s = report["settings"]
    lines = [f"tokens/s exclude prompt processing. SpecChat: {MEASUREMENT['specchat']}."]
    if "native" in report:
        lines += [f"llama.cpp plain: {MEASUREMENT['llama.cpp:plain']}."]
        if set(report["native"].get("modes", ())) & set(SERVER_MODES):
            lines += [f"llama.cpp server-plain: {MEASUREMENT['llama.cpp:server-plain']}."]
        lines += [f"llama.cpp speculative: {MEASUREMENT['llama.cpp:speculative']}.",
                  f"Both: same files, -c {s['n_ctx']}, -t {report['native']['n_threads']}, flash attention "
                  f"{'on' if s['flash_attn'] else 'off'}, CPU repacking {'on' if s['repack'] else 'off'}; "
                  "vs cpp = ratio to llama.cpp plain in the same round."]
        if not report["native"]["same_build_features"]:
            lines.append(f"WARNING: the builds differ: llama.cpp {report['native']['system_info']!r}, "
                         f"llama-cpp-python {report['native']['specchat_system_info']!r}.")
    lines.append(f"Medians over {s['repeat']} rounds (rotated order{', after a warm-up' if s['warmup'] else ''}); "
                 "vs none = ratio to SpecChat's none in the same round.")
    has_cpp = "native" in report
    if has_cpp and s["repeat"] > 1:
        lines.append("95% = the interval of the geometric mean of the per-round ratios to llama.cpp plain (t on "
                     "their logs): a ratio whose interval holds 1.00 is not told apart from llama.cpp's speed.")
    lines.append("")
    w = max([22, *(len(r.mode) for r in runs)])  # "llama.cpp:ngram-map-k4v" is 23
    lines.append(f"{'prompt':<18} {'mode':<{w}} {'tokens':>6} {'tok/s':>7} {'vs none':>8} "
                 + (f"{'vs cpp':>7} {'95%':>9} " if has_cpp else "") + f"{'accept':>7} {'acc/draft':>9} identical")
    for r in runs:
        counts = f"{r.accepted}/{r.drafted}" if r.drafted else ""
        accept = f"{r.acceptance_rate:.1%}" if r.drafted else ""
        band = r.vs_llama_cpp_interval
        interval = f"{band[0]:.2f}-{band[2]:.2f}" if band else "-"
        lines.append(f"{r.prompt_id:<18} {r.mode:<{w}} {r.tokens:>6} {r.tokens_per_second:>7.2f} {r.speedup:>7.2f}x "
                     + (f"{_ratio(r.speedup_vs_llama_cpp):>7} {interval:>9} " if has_cpp else "")
                     + f"{accept:>7} {counts:>9} {_same_column(r)}")
    lines.append("")
    for mode, m in report["summary"].items():
        overhead = m["median_engine_overhead"]
        lines.append(f"{mode:<{w}} median {m['median_tokens_per_second']:.2f} tok/s, vs none "
                     f"{m['median_speedup']:.2f}x (min {m['min_speedup']:.2f}x)"
                     + (f", vs llama.cpp plain {_ratio(m['median_speedup_vs_llama_cpp'])}" if has_cpp else "")
                     + (f", vs llama-server plain {_ratio(m['median_speedup_vs_llama_server'])} (lowest prompt "
                        f"{_ratio(m['min_speedup_vs_llama_server'])})"
                        if m.get("median_speedup_vs_llama_server") is not None else "")
                     + (f", identical {m['identical']}/{m['compared']}" if m["compared"] else ", identical n/a")
                     + (f", engine overhead {overhead:.2%}" if overhead is not None else ""))
    control = report["summary"].get(PREFIX + "plain-again")
    if control and control["min_speedup_vs_llama_cpp"] is not None:
        low, high = control["min_speedup_vs_llama_cpp"], control["max_speedup_vs_llama_cpp"]
        lines.append(f"Noise floor: llama.cpp plain, run again in every round, scored {low:.2f}-{high:.2f}x of itself "
                     "per prompt; a vs cpp ratio inside that band is this machine's noise, not a speed difference.")
    for add_on in add_ons:
        if report.get(add_on.key):
            lines += ["", *add_on.format(report[add_on.key], runs)]
    ref = report.get("llama_cpp_python_prompt_lookup")
    if ref:
        lines.append("")
        lines.append("llama-cpp-python's own Llama (same prompts, greedy; first to last streamed token):")
        ours = {r.prompt_id: r.tokens_per_second for r in runs if r.mode == "lookup"}
        for prompt_id, row in ref.items():
            lines.append(f"{prompt_id:<18} plain {row.get('plain', 0):.2f} tok/s, LlamaPromptLookupDecoding "
                         f"{row.get('prompt_lookup', 0):.2f} tok/s; SpecChat lookup {ours.get(prompt_id, 0):.2f} tok/s")
    return "\n".join(lines)

"""`specchat bench-serve`: SpecChat's OpenAI-compatible server timed on editing requests through OpenAI's own Python
client, with and without Predicted Outputs, beside llama.cpp's `llama-server` (`--native DIR`), plain and with its
n-gram speculation.

Columns: `specchat` (no prediction), `specchat+prediction` (edit requests with `prediction` = the file sent),
`llama-server` (plain) and `llama-server+TYPE` for each `--native-spec` type (llama-server ignores `prediction`;
these get the same requests with it, to show that). SpecChat's server runs in this process (EngineThread and
ServerThread on 127.0.0.1, any free port); each llama-server is a process of its own, loaded once
(app/cli/native_server.py). Every request is greedy (unless the sampling flags say otherwise), not streamed, with
one fixed `max_tokens`, and `cache_prompt: false`, so every server processes the whole prompt each time.

Rounds as `specchat bench`'s: an untimed warm-up of every column first, then per request each round runs every
column once, round r starting with column r mod n; medians over rounds and ratios measured in the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from app import settings as settings_mod
from app.atomic import atomic_write_text
from app.cli import native_bench, native_server
from app.cli.options import UserError, add_generation_args, add_model_args, gen_params, pair_config, resolve_models
from app.engine.drafters import NEEDS_DRAFT
from app.engine.sampling import SamplingParams
from app.models.recommended_sampling import recommended_for

DEFAULT_MAX_TOKENS = 1024
SPECCHAT, PREDICTED, LLAMA_SERVER = "specchat", "specchat+prediction", "llama-server"
# llama.cpp's n-gram speculation types that need no files (app/cli/native_bench.py). Default columns: ngram-map-k,
# the n-gram drafter the project has compared against since run 2 (12-token keys, drafts up to 48 sized by what
# the key's last draft got accepted), and ngram-mod, what llama-server's own --spec-default turns on (24-token
# matches, drafts of 48-64 only).
SPEC_TYPES = tuple(m for m in native_bench.NGRAM_MODES if m != "ngram-cache")
DEFAULT_SPEC = "ngram-map-k,ngram-mod"
SPEC_DEFAULT_ARGS = ("--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "48", "--spec-ngram-mod-n-max", "64")
KINDS = ("edit", "chat")
OPENAI_MISSING = ("bench-serve talks to the servers through OpenAI's Python client, which is not installed: "
                  "pip install 'openai>=1.30' (it is in SpecChat's test extra)")

MEASUREMENT = {
    "tokens_per_second": "completion tokens / the request's wall time as the client measured it (prompt processing, "
                         "HTTP and JSON included)",
    "server_tokens_per_second": "the server's own decode rate, prompt excluded: SpecChat's "
                                "timings.predicted_per_second (tokens its decode steps produced / decode wall time); "
                                "llama-server's "
                                "(predicted_n - 1) / predicted_ms, the same measure (its first token comes from the "
                                "prompt's pass, which its own predicted_per_second counts)",
    "vs": "median over rounds of the ratio of tokens_per_second to that column's in the same round",
}


@dataclass(frozen=True)
class ServeRequest:
    id: str
    kind: str  # "edit" or "chat"
    text: str  # the user message
    prediction: str | None = None  # edit: the file, which the edited file mostly repeats

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text}]


@dataclass(frozen=True)
class Column:
    name: str
    server: str  # which server answers: SPECCHAT, LLAMA_SERVER or "llama-server+TYPE"
    prediction: bool  # edit requests carry `prediction`

    def runs(self, request: ServeRequest) -> bool:
        """specchat+prediction without a prediction would be `specchat` again: chat rows leave it out."""
        return not (self.name == PREDICTED and request.prediction is None)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "bench-serve", help="time `specchat serve` on editing requests, with and without Predicted Outputs, "
        "through OpenAI's client (optionally beside llama-server)",
        description="SpecChat's server in this process and, with --native DIR, llama.cpp's llama-server on the same "
        "GGUF, plain and with n-gram speculation; every request through openai.OpenAI, greedy, not streamed, fixed "
        "max_tokens, no cached prompt. Rotated rounds after an untimed warm-up; medians and same-round ratios.")
    p.add_argument("--requests", type=Path, help="JSONL: {\"id\", \"kind\": \"edit\", \"lang\", \"instruction\", "
                   "\"file\"} or {\"id\", \"kind\": \"chat\", \"prompt\"} (default: the built-in ten)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per request (default 3)")
    p.add_argument("--max-tokens", type=int, default=None, help=f"max_tokens of every request (default "
                   f"{DEFAULT_MAX_TOKENS}, or -n)")
    p.add_argument("--json-out", type=Path, metavar="FILE", help="also write the whole report, every round's "
                   "numbers and replies included, to FILE")
    p.add_argument("--native", type=Path, metavar="DIR", help="folder holding llama.cpp's llama-server: add its "
                   "columns")
    p.add_argument("--native-spec", default=DEFAULT_SPEC, metavar="TYPES", help="llama-server's n-gram speculation "
                   f"types, one column each (default {DEFAULT_SPEC}; any of {', '.join(SPEC_TYPES)}; \"\": none)")
    p.add_argument("--native-timeout", type=float, default=600.0, metavar="S",
                   help="seconds a llama-server may take to load, and a request to answer")
    add_model_args(p)
    add_generation_args(p)
    p.set_defaults(func=cmd_bench_serve)


# --- requests -----------------------------------------------------------------------------------------------------

def edit_message(lang: str, instruction: str, file: str) -> str:
    return (f"{instruction}\nReply with the whole edited file in a single ```{lang} code block and nothing else.\n\n"
            f"```{lang}\n{file.rstrip(chr(10))}\n```")


def load_requests(path: Path | None) -> list[ServeRequest]:
    """The JSONL rows, checked; an error names the line."""
    from app.cli.bench import jsonl_rows

    try:
        source, rows = jsonl_rows(path, "bench_serve_requests.jsonl", "requests", "the built-in requests")
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    out: list[ServeRequest] = []
    for number, row in rows:

        def need(key: str, row: Any = row, number: int = number) -> str:
            value = row.get(key) if isinstance(row, dict) else None
            if not isinstance(value, str) or not value.strip():
                raise UserError(f"{source}, line {number}: \"{key}\" must be a non-empty string")
            return value

        rid, kind = need("id"), need("kind")
        if kind == "edit":
            out.append(ServeRequest(rid, kind, edit_message(need("lang"), need("instruction"), need("file")),
                                    need("file")))
        elif kind == "chat":
            out.append(ServeRequest(rid, kind, need("prompt")))
        else:
            raise UserError(f"{source}, line {number}: \"kind\" must be one of {', '.join(KINDS)}, got {kind!r}")
        if [r.id for r in out].count(rid) > 1:
            raise UserError(f"{source}, line {number}: the id {rid!r} repeats")
    if not out:
        raise UserError(f"{source} holds no requests")
    return out


def spec_types(text: str) -> list[str]:
    types = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [t for t in types if t not in SPEC_TYPES]
    if unknown:
        raise UserError(f"--native-spec: unknown {', '.join(unknown)}; use some of {', '.join(SPEC_TYPES)}")
    return types


def spec_args(kind: str) -> tuple[str, ...]:
    """llama-server's flags for one n-gram type: its own defaults, and ngram-mod as --spec-default sets it."""
    return ("--spec-type", kind, *(SPEC_DEFAULT_ARGS if kind == "ngram-mod" else ()))


# --- one request --------------------------------------------------------------------------------------------------

def body(request: ServeRequest, column: Column, model: str, max_tokens: int, s: SamplingParams) -> dict[str, Any]:
    """The create() arguments. Every sampling value is sent, to both servers alike."""
    out: dict[str, Any] = {
        "model": model, "messages": request.messages(), "max_tokens": max_tokens, "stream": False,
        "temperature": s.temperature, "top_p": s.top_p, "frequency_penalty": s.frequency_penalty,
        "presence_penalty": s.presence_penalty,
        "extra_body": {"top_k": s.top_k, "min_p": s.min_p, "repeat_penalty": s.repeat_penalty,
                       "repeat_last_n": s.repeat_last_n, "cache_prompt": False}}
    if s.seed is not None:
        out["seed"] = s.seed
    if column.prediction and request.prediction is not None:
        out["prediction"] = {"type": "content", "content": request.prediction}
    return out


def timed_call(client: Any, kwargs: dict[str, Any], column: Column) -> dict[str, Any]:
    """One request, timed by the client; its numbers and reply."""
    start = time.perf_counter()
    reply = client.chat.completions.create(**kwargs)
    wall = time.perf_counter() - start
    usage = reply.usage
    details = getattr(usage, "completion_tokens_details", None) if usage else None
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) if usage else None
    extra = reply.model_extra or {}
    timings = extra.get("timings") or {}
    figures = extra.get("specchat") or {}
    tokens = usage.completion_tokens if usage else 0
    return {
        "column": column.name, "wall_s": wall, "completion_tokens": tokens,
        "prompt_tokens": usage.prompt_tokens if usage else 0, "cached_tokens": cached,
        "tokens_per_second": tokens / wall if wall > 0 else 0.0,
        "server_tokens_per_second": decode_rate(timings, column.server == SPECCHAT),
        "accepted_prediction_tokens": getattr(details, "accepted_prediction_tokens", None),
        "rejected_prediction_tokens": getattr(details, "rejected_prediction_tokens", None),
        "drafted": figures.get("drafted", timings.get("draft_n", 0)),
        "accepted": figures.get("accepted", timings.get("draft_n_accepted", 0)),
        "finish_reason": reply.choices[0].finish_reason, "text": reply.choices[0].message.content or "",
        "timings": timings, "specchat": figures or None}


def decode_rate(timings: dict[str, Any], specchat: bool) -> float:
    n, ms = int(timings.get("predicted_n", 0)), float(timings.get("predicted_ms", 0.0))
    if specchat or n < 2 or ms <= 0:
        return float(timings.get("predicted_per_second", 0.0))
    return (n - 1) * 1000.0 / ms


def _first_differing_char(a: str, b: str) -> int:
    """The index of the first character where two different texts part (the shorter's length if one begins the
    other)."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def first_difference(ours: str, theirs: str) -> dict[str, Any] | None:
    """Where two replies part: None when equal; else the character, its line and column, and both sides."""
    if ours == theirs:
        return None
    i = _first_differing_char(ours, theirs)
    line = ours.count("\n", 0, i) + 1
    return {"char": i, "line": line, "column": i - (ours.rfind("\n", 0, i) + 1) + 1,
            "specchat": ours[i:i + 40], "this": theirs[i:i + 40]}


def plain_parting(pieces: Sequence[str], margins: Sequence[float], text: str) -> dict[str, Any] | None:
    """Where `text` parts from the target's own plain reply, given as its tokens' texts (`pieces`) and the top-two
    logit margins there: None when equal; else the plain reply's token at the first differing character, its
    margin (None where the plain reply had ended) and whether that is a near-tie (parting.NEAR_TIE_MARGIN)."""
    from app.engine.parting import NEAR_TIE_MARGIN

    plain = "".join(pieces)
    if text == plain:
        return None
    i = _first_differing_char(plain, text)
    token, end, start = len(pieces), 0, 0  # start: the first token of the character being completed
    for t, piece in enumerate(pieces):
        end += len(piece)
        if end > i:
            token = start
            break
        if piece:
            start = t + 1
    margin = float(margins[token]) if token < len(margins) else None
    return {"token": token, "char": i, "margin": margin,
            "near_tie": margin is not None and margin < NEAR_TIE_MARGIN}


def plain_references(cfg: Any, requests: list[ServeRequest], calls: list[dict[str, Any]], max_tokens: int,
                     sampling: SamplingParams) -> dict[str, dict[str, Any]]:
    """For every request whose replies are not all one text: the target's plain reply with the run's greedy
    `sampling` (its penalties included; mode none, untimed, in this process, after the servers are gone) and its
    top-two margin at each token, so a parting can be told a near-tie or a real difference as `specchat bench`
    tells them."""
    from app.engine.events import FinishEvent, TokenEvent
    from app.engine.session import GenParams, SpecSession

    differing = [r for r in requests if len({c["text"] for c in calls if c["request"] == r.id}) > 1]
    if not differing:
        return {}
    out: dict[str, dict[str, Any]] = {}
    params = GenParams(mode="none", n_predict=max_tokens, sampling=sampling, track_margins=True)
    session = SpecSession(replace(cfg, draft=None))
    try:
        for request in differing:
            pieces: list[str] = []
            for event in session.generate(session.chat_prompt(request.messages()), params):
                if isinstance(event, TokenEvent):
                    pieces.append(event.text)
                elif isinstance(event, FinishEvent):
                    out[request.id] = {"pieces": pieces, "margins": list(event.margins)}
    finally:
        session.close()
    return out


# --- the report ---------------------------------------------------------------------------------------------------

def _ratios(calls: list[dict[str, Any]], base: list[dict[str, Any]], key: str) -> list[float]:
    by_round = {c["round"]: c[key] for c in base}
    return [c[key] / by_round[c["round"]] for c in calls if by_round.get(c["round"], 0) > 0]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def results(requests: list[ServeRequest], columns: list[Column], calls: list[dict[str, Any]],
            plain: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per request and column: medians, same-round ratios, prediction counts, and the replies against specchat's
    and, where `plain` holds the request's plain reply (plain_references), against the target's own."""
    plain = plain or {}
    out = []
    for request in requests:
        mine = [c for c in calls if c["request"] == request.id]
        base = {name: [c for c in mine if c["column"] == name] for name in (SPECCHAT, LLAMA_SERVER)}
        for column in (c for c in columns if c.runs(request)):
            runs = [c for c in mine if c["column"] == column.name]
            last = runs[-1]
            ours = {c["round"]: c["text"] for c in base[SPECCHAT]}
            differs = [(c["round"], first_difference(ours[c["round"]], c["text"])) for c in runs]
            differs = [(r, d) for r, d in differs if d is not None]
            out.append({
                "request": request.id, "kind": request.kind, "column": column.name, "rounds": len(runs),
                "completion_tokens": last["completion_tokens"], "prompt_tokens": last["prompt_tokens"],
                "finish_reason": last["finish_reason"],
                "median_tokens_per_second": _median([c["tokens_per_second"] for c in runs]),
                "median_server_tokens_per_second": _median([c["server_tokens_per_second"] for c in runs]),
                "median_latency_s": _median([c["wall_s"] for c in runs]),
                "vs_specchat": _median(_ratios(runs, base[SPECCHAT], "tokens_per_second")),
                "vs_specchat_server": _median(_ratios(runs, base[SPECCHAT], "server_tokens_per_second")),
                "vs_llama_server": _median(_ratios(runs, base[LLAMA_SERVER], "tokens_per_second"))
                if base[LLAMA_SERVER] else None,
                "vs_llama_server_server": _median(_ratios(runs, base[LLAMA_SERVER], "server_tokens_per_second"))
                if base[LLAMA_SERVER] else None,
                "accepted_prediction_tokens": last["accepted_prediction_tokens"],
                "rejected_prediction_tokens": last["rejected_prediction_tokens"],
                "drafted": last["drafted"], "accepted": last["accepted"],
                "same_as_specchat": not differs,
                "differs_in_rounds": [r for r, _ in differs],
                "first_difference": differs[0][1] if differs else None,
                "prompt_tokens_as_specchat": last["prompt_tokens"] == base[SPECCHAT][-1]["prompt_tokens"],
                "parts_from_plain": _first_plain_parting(plain.get(request.id), runs),
            })
    return out


def _first_plain_parting(reference: dict[str, Any] | None, runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first round whose reply parts from the target's plain reply, where it parts; None when every round's
    reply is the plain one or there is no reference (greedy replies all alike, or sampled)."""
    if reference is None:
        return None
    for run in runs:
        parting = plain_parting(reference["pieces"], reference["margins"], run["text"])
        if parting is not None:
            return {"round": run["round"], **parting}
    return None


def summary(columns: list[Column], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per column and kind: the median over requests of each request's median ratio."""
    out: dict[str, Any] = {}
    for column in columns:
        for kind in KINDS:
            mine = [r for r in rows if r["column"] == column.name and r["kind"] == kind]
            if not mine:
                continue
            out.setdefault(column.name, {})[kind] = {
                "requests": len(mine),
                **{key: _median([r[key] for r in mine if r[key] is not None])
                   for key in ("median_tokens_per_second", "median_server_tokens_per_second", "median_latency_s",
                               "vs_specchat", "vs_specchat_server", "vs_llama_server", "vs_llama_server_server")},
                "same_as_specchat": sum(r["same_as_specchat"] for r in mine),
                # replies that part from the target's plain reply where it was not a near-tie
                "real_differences": sum(1 for r in mine if (r.get("parts_from_plain") or {}).get("near_tie") is False),
            }
    return out


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _same(row: dict[str, Any]) -> str:
    return _vs_specchat(row) + _vs_plain(row.get("parts_from_plain"))


def _vs_plain(parting: dict[str, Any] | None) -> str:
    """How the reply stands to the target's own plain reply, where one was decoded (replies that differ)."""
    if parting is None:
        return ""
    if parting["margin"] is None:
        return f"; parts from plain at token {parting['token']}, after the plain reply's end"
    kind = "a near-tie" if parting["near_tie"] else "REAL DIFFERENCE"
    return f"; parts from plain at token {parting['token']}: {kind} (margin {parting['margin']:.3f})"


def _vs_specchat(row: dict[str, Any]) -> str:
    if row["column"] == SPECCHAT:
        return "(reference)"
    if row["same_as_specchat"]:
        return "yes"
    d = row["first_difference"]
    where = f"no, round {row['differs_in_rounds'][0]}: line {d['line']} col {d['column']} (char {d['char']}): " \
            f"{d['specchat'][:20]!r} vs {d['this'][:20]!r}"
    return where + ("" if row["prompt_tokens_as_specchat"] else f"; prompt {row['prompt_tokens']} tokens")


def format_report(report: dict[str, Any]) -> str:
    s = report["settings"]
    has_ls = any(c.startswith(LLAMA_SERVER) for c in report["columns"])
    lines = [f"tok/s: {MEASUREMENT['tokens_per_second']}.", f"srv tok/s: {MEASUREMENT['server_tokens_per_second']}.",
             f"Medians over {s['rounds']} round(s) (rotated order, after a warm-up); vs sc, vs ls: "
             f"{MEASUREMENT['vs']} (specchat's, llama-server's). max_tokens {s['max_tokens']}, mode {s['mode']}, "
             f"{'greedy' if s['sampling']['temperature'] <= 0 else 'sampled'}, no cached prompts.", ""]
    w = max(20, *(len(c) for c in report["columns"]))
    rw = max(17, *(len(r["request"]) for r in report["results"]))
    lines.append(f"{'request':<{rw}} {'column':<{w}} {'tokens':>6} {'wall s':>7} {'tok/s':>6} {'srv tok/s':>9} "
                 f"{'vs sc':>6} " + (f"{'vs ls':>6} " if has_ls else "") + f"{'acc/drafted':>11} "
                 f"{'pred acc/rej':>12} same as specchat")
    for r in report["results"]:
        pred = (f"{r['accepted_prediction_tokens']}/{r['rejected_prediction_tokens']}"
                if r["accepted_prediction_tokens"] is not None and r["column"] == PREDICTED else "")
        drafts = f"{r['accepted']}/{r['drafted']}" if r["drafted"] else ""
        lines.append(f"{r['request']:<{rw}} {r['column']:<{w}} {r['completion_tokens']:>6} "
                     f"{r['median_latency_s']:>7.2f} {r['median_tokens_per_second']:>6.2f} "
                     f"{r['median_server_tokens_per_second']:>9.2f} {_x(r['vs_specchat']):>6} "
                     + (f"{_x(r['vs_llama_server']):>6} " if has_ls else "") + f"{drafts:>11} {pred:>12} {_same(r)}")
    lines.append("")
    for column, kinds in report["summary"].items():
        for kind, m in kinds.items():
            lines.append(f"{column:<{w}} {kind}: median {m['median_tokens_per_second']:.2f} tok/s "
                         f"({m['median_server_tokens_per_second']:.2f} srv), latency {m['median_latency_s']:.2f} s, "
                         f"vs specchat {_x(m['vs_specchat'])} (srv {_x(m['vs_specchat_server'])})"
                         + (f", vs llama-server {_x(m['vs_llama_server'])} (srv {_x(m['vs_llama_server_server'])})"
                            if has_ls else "")
                         + f", same as specchat {m['same_as_specchat']}/{m['requests']}"
                         + f", real differences from plain {m['real_differences']}")
    ngram = [c for c in report["summary"] if c.startswith(LLAMA_SERVER + "+") and "edit" in report["summary"][c]]
    if len(ngram) > 1:
        best = max(ngram, key=lambda c: report["summary"][c]["edit"]["vs_llama_server"] or 0.0)
        lines.append(f"llama-server's best n-gram type on these edits: {best.removeprefix(LLAMA_SERVER + '+')}")
    return "\n".join(lines)


# --- the command --------------------------------------------------------------------------------------------------

def cmd_bench_serve(args: argparse.Namespace) -> int:
    try:
        import openai
    except ImportError:
        raise UserError(OPENAI_MISSING) from None
    from tqdm import tqdm

    from app.cli.bench import WARMUP_MESSAGES, WARMUP_N_PREDICT, machine_description, native_settings, round_order
    from app.cli.serve import sampling_values
    from app.engine.session import SpecSession
    from app.server.api import ApiConfig, asgi_app
    from app.server.engine_thread import EngineThread
    from app.server.runner import ServerThread

    if args.rounds < 1:
        raise UserError("--rounds must be at least 1")
    max_tokens = args.max_tokens or args.n_predict or DEFAULT_MAX_TOKENS
    requests = load_requests(args.requests)
    types = spec_types(args.native_spec) if args.native else []
    if args.native:
        native_server.check_tool(args.native, "--native")
    settings, _warning = settings_mod.load()
    target, draft = resolve_models(args, settings)
    params = gen_params(args, settings, draft is not None, recommended_for(target).values, preset="greedy")
    if params.mode in NEEDS_DRAFT and draft is None:
        raise UserError(f"--mode {params.mode} needs a draft model (-md DRAFT.GGUF)")
    if params.mode not in NEEDS_DRAFT:
        draft = None  # as `specchat serve`: a draft that the mode does not use is not loaded
    cfg = pair_config(args, settings, target, draft)
    columns = [Column(SPECCHAT, SPECCHAT, False), Column(PREDICTED, SPECCHAT, True)]
    if args.native:
        columns.append(Column(LLAMA_SERVER, LLAMA_SERVER, False))
        columns += [Column(f"{LLAMA_SERVER}+{t}", f"{LLAMA_SERVER}+{t}", True) for t in types]
    servers: dict[str, str] = {}  # base URLs
    commands: dict[str, list[str]] = {}  # each llama-server's command line
    with tempfile.TemporaryDirectory(prefix="specchat-bench-serve-") as tmp, contextlib.ExitStack() as stack:
        print(f"specchat: loading {target.name} for SpecChat's server ...", file=sys.stderr, flush=True)
        engine = EngineThread(lambda: SpecSession(cfg), params.mode)
        stack.callback(engine.close)
        if not engine.wait_ready():
            raise UserError(f"bench-serve: SpecChat's server could not load the models: {engine.load_error}")
        http = ServerThread(asgi_app(engine, ApiConfig(params, sampling_values(params.sampling))), "127.0.0.1", 0)
        stack.callback(http.stop)
        servers[SPECCHAT] = http.start().address.base_url
        if args.native:
            native = native_settings(args.native, cfg, params, args.native_timeout)
            for column in columns[2:]:
                kind = column.server.removeprefix(LLAMA_SERVER + "+") if "+" in column.server else None
                print(f"specchat: starting {column.server} ...", file=sys.stderr, flush=True)
                proc = native_server.NativeServer(native, Path(tmp), spec_args(kind) if kind else (), column.server)
                stack.callback(proc.close)
                servers[column.server], commands[column.server] = proc.base_url, proc.command
        clients = {c.server: openai.OpenAI(base_url=servers[c.server], api_key="unused", max_retries=0,
                                           timeout=args.native_timeout) for c in columns}
        model = target.stem
        calls: list[dict[str, Any]] = []
        total = len(columns) + sum(args.rounds * sum(c.runs(r) for c in columns) for r in requests)
        warm_up = ServeRequest("warm-up", "chat", WARMUP_MESSAGES[0]["content"])
        with tqdm(total=total, desc="bench-serve", unit="request", file=sys.stderr, disable=None) as bar:
            for column in columns:  # untimed
                _call(clients[column.server], body(warm_up, column, model, WARMUP_N_PREDICT, params.sampling),
                      column, "the warm-up")
                bar.update(1)
            for request in requests:
                mine = {c.name: c for c in columns if c.runs(request)}
                for r in range(args.rounds):
                    for order, column in enumerate(mine[name] for name in round_order(list(mine), r)):
                        call = _call(clients[column.server], body(request, column, model, max_tokens,
                                                                  params.sampling), column, f"{request.id}, round {r}")
                        calls.append({"request": request.id, "round": r, "order": order, **call})
                        bar.update(1)
    # Greedy replies that part are told near-ties or real differences against the target's plain reply.
    plain = plain_references(cfg, requests, calls, max_tokens, params.sampling) if params.sampling.greedy else {}
    rows = results(requests, columns, calls, plain)
    report: dict[str, Any] = {
        "machine": machine_description(),
        "models": {"target": str(target), "draft": str(draft) if draft else None},
        "settings": {"max_tokens": max_tokens, "rounds": args.rounds, "mode": params.mode,
                     "sampling": asdict(params.sampling),
                     "n_ctx": cfg.n_ctx, "n_threads": cfg.n_threads, "flash_attn": cfg.flash_attn,
                     "repack": cfg.repack, "n_batch": cfg.n_batch, "cache_prompt": False, "stream": False,
                     "order": "an untimed warm-up of every column, then per request: round r starts with column "
                              "r mod n", "client": f"openai {openai.__version__}, max_retries 0"},
        "measurement": MEASUREMENT,
        "columns": [c.name for c in columns],
        "requests": [{"id": r.id, "kind": r.kind, "prediction_chars": len(r.prediction or "")} for r in requests],
        "results": rows,
        "summary": summary(columns, rows),
        "calls": calls,
    }
    if args.native:
        report["native"] = {
            "bin_dir": str(args.native), "version": native_bench.tool_version(args.native, native_server.SERVER),
            "spec_types": types, "commands": commands}
    if args.json_out is not None:
        atomic_write_text(args.json_out, json.dumps(report, indent=2) + "\n")
    print(format_report(report))
    return 0


def _call(client: Any, kwargs: dict[str, Any], column: Column, what: str) -> dict[str, Any]:
    import openai

    try:
        return timed_call(client, kwargs, column)
    except openai.OpenAIError as error:
        raise UserError(f"bench-serve: {column.server} failed on {what} ({column.name}): {error}") from error

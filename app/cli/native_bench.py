"""llama.cpp's own executables as bench modes: `llama-completion` (plain) and `llama-speculative-simple`.

`plain-again` runs llama-completion a second time in each round, exactly as `plain`: its ratio to `plain` is
the machine's noise floor (an A/A control), so a reader can tell which differences in the table are real.

They run on the exact prompt text SpecChat renders, from a file. `-f` drops one trailing newline, so the
file gets one extra; `--no-escape` keeps backslashes in code literal; `-no-cnv` stops llama-completion
from applying the chat template a second time. llama-completion's `--verbose-prompt` token list is checked
against SpecChat's token ids: a mismatch is an error, since the timings would not be comparable.

Tokens/s exclude prompt processing in both tools:
- plain: llama_perf's "eval time = X ms / N runs", the one-token decodes after the prompt, plus its "sampling
  time = S ms" (SpecChat's rate includes its own sampling too): N / (X + S). llama_decode alone (N / X) is kept
  as `eval_tokens_per_second`. Printing the tokens stays uncounted on llama.cpp's side.
- speculative: "decoded N tokens in X seconds", the wall clock of the draft/verify loop after the prompt
  (drafting, verification and sampling included), as SpecChat's `tokens_per_second`.

SpecChat's --draft-min is not passed on: llama.cpp's --spec-draft-n-min means something else (it drops drafts
shorter than N), and both default to no minimum. SpecChat's governor has no llama.cpp counterpart: that
difference is what the comparison measures.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from app.cli.options import UserError

# Every n-gram spec type llama-speculative-simple takes with no files: ngram-mod is what llama.cpp's own
# `--spec-default` turns on (24-token match, drafts of 48-64), ngram-map-k4v the counted-values map, ngram-cache
# lookup decoding's context cache (no static or dynamic cache file).
NGRAM_MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# server-plain: llama-server, loaded once for the whole bench (app/cli/native_server.py)
SERVER_MODES = ("server-plain",)
NATIVE_MODES = ("plain", "plain-again", *SERVER_MODES, "draft-simple", "draft-mtp", *NGRAM_MODES)
PLAIN_MODES = ("plain", "plain-again")  # llama-completion; the second is the A/A control
COMPLETION = "llama-completion"
SPECULATIVE = "llama-speculative-simple"
PREFIX = "llama.cpp:"  # bench mode names: "llama.cpp:plain", "llama.cpp:draft-simple", ...

_EVAL = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_SAMPLING = re.compile(r"\bsampling time =\s*([\d.]+) ms")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s*([\d.]+|-?nan|inf) t/s")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNT = re.compile(r"^(?:[\d.]+ \w )?(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(-?\d+)\s*$", re.M)
_N_PROMPT = re.compile(r"number of tokens in prompt = (\d+)")
_TOKEN_LINE = re.compile(r"^(?:[\d.]+ \w )?\s*(-?\d+) -> '", re.M)
_SYSTEM_INFO = re.compile(r"system_info: .*?\|\s*(.*?)\s*$", re.M)


class NativeError(UserError):
    """A llama.cpp tool failed, or its output cannot be compared: one clear line, exit 2."""


@dataclass(frozen=True)
class NativeSettings:
    """What both engines must share for the comparison to be fair (see BENCHMARKS.md)."""

    bin_dir: Path
    target: Path
    draft: Path | None
    n_ctx: int
    n_threads: int
    n_batch: int
    flash_attn: bool
    repack: bool
    n_gpu_layers: int
    n_gpu_layers_draft: int
    type_k: str
    type_v: str
    temp: float
    top_k: int
    top_p: float
    min_p: float
    seed: int | None
    draft_max: int  # draft-simple's --spec-draft-n-max; the n-gram modes keep llama.cpp's own sizes
    p_min: float
    timeout_s: float = 600.0
    extra_args: tuple[str, ...] = ()
    # Penalties, always passed: llama.cpp would otherwise take a GGUF's general.sampling.penalty_* keys.
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n_threads_draft: int | None = None  # SpecChat's -td, passed on to draft-simple; None: as n_threads


@dataclass(frozen=True)
class NativeResult:
    mode: str  # one of NATIVE_MODES
    command: tuple[str, ...]
    n_tokens: int
    tokens_per_second: float
    decode_ms: float
    prompt_ms: float
    n_drafted: int = 0
    n_accepted: int = 0
    text: str | None = None  # the reply as printed; None when it could not be cut out of the output
    prompt_tokens: tuple[int, ...] = field(default=(), repr=False)  # llama-completion's --verbose-prompt list
    system_info: str | None = None  # llama-completion's build features ("CPU : AVX2 = 1 | ..."), to compare builds
    eval_tokens_per_second: float | None = None  # plain: llama_decode alone, sampling left out (its own report)


def tool_paths(bin_dir: Path) -> dict[str, Path]:
    """Both executables, or an error naming what is missing and how to build it."""
    found = {}
    for tool in (COMPLETION, SPECULATIVE):
        path = Path(bin_dir) / tool
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise NativeError(f"--native: {path} is missing or not executable; build it as docs/BENCHMARKS.md "
                              "says (section \"Comparing with llama.cpp itself\")")
        found[tool] = path
    return found


def tool_version(bin_dir: Path, tool: str = COMPLETION) -> str:
    try:
        out = subprocess.run([str(Path(bin_dir) / tool), "--version"], capture_output=True, text=True,
                             timeout=60, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("version:")]
    return lines[0].removeprefix("version:").strip() if lines else "unknown"


def write_prompt(path: Path, text: str) -> None:
    # llama.cpp's -f strips exactly one trailing newline; chat templates usually end with one.
    path.write_text(text + "\n", encoding="utf-8")


def _layers(n: int) -> str:
    return "all" if n < 0 else str(n)


def model_args(s: NativeSettings) -> list[str]:
    """The flags every llama.cpp tool of the bench shares with SpecChat's load: model, context, threads, attention,
    repacking, GPU layers and KV cache types (llama-server's too, app/cli/native_server.py)."""
    return ["-m", str(s.target), "-c", str(s.n_ctx), "-t", str(s.n_threads), "-fa", "on" if s.flash_attn else "off",
            "--repack" if s.repack else "--no-repack", "-ngl", _layers(s.n_gpu_layers), "-ctk", s.type_k,
            "-ctv", s.type_v]


def command(mode: str, s: NativeSettings, prompt_file: Path, n_predict: int, n_prompt: int = 0) -> list[str]:
    if mode not in NATIVE_MODES:
        raise NativeError(f"Unknown llama.cpp mode {mode!r}: use one of {', '.join(NATIVE_MODES)}")
    plain = mode in PLAIN_MODES
    tool = COMPLETION if plain else SPECULATIVE
    # speculative-simple refuses a prompt longer than one logical batch; -ub keeps the compute chunks equal.
    n_batch = s.n_batch if plain else max(s.n_batch, n_prompt)
    cmd = [str(Path(s.bin_dir) / tool), *model_args(s), "-f", str(prompt_file), "--no-escape",
           "-n", str(n_predict), "-b", str(n_batch), "-ub", str(s.n_batch),
           "--temp", repr(s.temp), "--top-k", str(s.top_k), "--top-p", repr(s.top_p), "--min-p", repr(s.min_p),
           "--repeat-penalty", repr(s.repeat_penalty), "--repeat-last-n", str(s.repeat_last_n),
           "--frequency-penalty", repr(s.frequency_penalty), "--presence-penalty", repr(s.presence_penalty)]
    if s.seed is not None and s.seed >= 0:
        cmd += ["--seed", str(s.seed)]
    if plain:
        cmd += ["-no-cnv", "--no-display-prompt", "--verbose-prompt"]
    else:
        cmd += ["--spec-type", mode]
    if mode == "draft-mtp":  # the target's own MTP head (SpecChat's --mode mtp), with SpecChat's K and p_min
        cmd += ["--spec-draft-n-max", str(s.draft_max), "--spec-draft-p-min", repr(s.p_min)]
    if mode == "draft-simple":
        if s.draft is None:
            raise NativeError("llama.cpp's draft-simple needs a draft model (-md)")
        cmd += ["-md", str(s.draft), "-ngld", _layers(s.n_gpu_layers_draft), "-ctkd", s.type_k, "-ctvd", s.type_v,
                "--spec-draft-n-max", str(s.draft_max), "--spec-draft-p-min", repr(s.p_min)]
        if s.n_threads_draft is not None:
            cmd += ["-td", str(s.n_threads_draft or s.n_threads)]
    return cmd + list(s.extra_args)


def run(mode: str, s: NativeSettings, prompt_file: Path, n_predict: int, prompt_text: str,
        n_prompt: int = 0) -> NativeResult:
    cmd = command(mode, s, prompt_file, n_predict, n_prompt)
    tool = Path(cmd[0]).name
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=s.timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise NativeError(f"{tool} ({mode}) ran past {s.timeout_s:.0f} s{output_tail(exc.stderr)}") from exc
    except OSError as exc:
        raise NativeError(f"{tool} ({mode}) could not start: {exc}") from exc
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        raise NativeError(f"{tool} ({mode}) exited with status {proc.returncode}{output_tail(stderr)}")
    try:
        if mode in PLAIN_MODES:
            return _plain_result(mode, cmd, stdout, stderr)
        return _spec_result(mode, cmd, stdout, stderr, prompt_text)
    except ValueError as exc:
        raise NativeError(f"{tool} ({mode}): {exc}{output_tail(stderr)}") from exc


def output_tail(output: str | bytes | None, lines: int = 8, what: str = "stderr") -> str:
    """A tool's last non-empty output lines, as the end of an error message ("" when there are none)."""
    if isinstance(output, bytes):
        output = output.decode("utf-8", errors="replace")
    last = [line for line in (output or "").splitlines() if line.strip()][-lines:]
    return (f": last {what} lines:\n  " + "\n  ".join(last)) if last else ""


def parse_completion_timings(stderr: str) -> tuple[int, float, float, float]:
    """(one-token decodes, their ms, prompt ms, sampling ms) from llama_perf's summary."""
    ev, pe, sa = _EVAL.search(stderr), _PROMPT_EVAL.search(stderr), _SAMPLING.search(stderr)
    if ev is None or pe is None or sa is None:
        raise ValueError("no llama_perf timing lines (\"eval time = ... ms / N runs\", \"sampling time = ... ms\") "
                         "in its output")
    return int(ev.group(2)), float(ev.group(1)), float(pe.group(1)), float(sa.group(1))


def parse_system_info(stderr: str) -> str | None:
    """The backend features after "system_info: n_threads = ... |", spaced as llama_print_system_info()."""
    m = _SYSTEM_INFO.search(stderr)
    return normalise_system_info(m.group(1)) if m else None


def normalise_system_info(text: str) -> str:
    return " ".join(text.split()).strip(" |")


def parse_prompt_tokens(stderr: str) -> list[int]:
    """The prompt token ids that `--verbose-prompt` lists (a piece may span lines: only `id -> '` lines count)."""
    head = _N_PROMPT.search(stderr)
    if head is None:
        raise ValueError("no \"number of tokens in prompt\" line: was --verbose-prompt given?")
    n = int(head.group(1))
    ids = [int(m.group(1)) for m in _TOKEN_LINE.finditer(stderr, head.end())][:n]
    if len(ids) != n:
        raise ValueError(f"--verbose-prompt announced {n} prompt tokens but listed {len(ids)}")
    return ids


def parse_speculative(stderr: str) -> dict[str, float]:
    """decoded tokens, decode seconds, speed, encode seconds and the draft counters of speculative-simple."""
    dec, enc = _DECODED.search(stderr), _ENCODED.search(stderr)
    if dec is None or enc is None:
        raise ValueError("no \"decoded N tokens in X seconds\" line in its output")
    out: dict[str, float] = {"decoded": int(dec.group(1)), "decode_s": float(dec.group(2)),
                             "speed": float(dec.group(3)), "encode_s": float(enc.group(2))}
    out.update({name: int(value) for name, value in _COUNT.findall(stderr)})
    for name in ("n_drafted", "n_accept"):
        if name not in out:
            raise ValueError(f"no \"{name} = N\" line in its output")
    return out


def completion_text(stdout: str) -> str:
    # With --no-display-prompt stdout is the reply, " [end of text]\n" at an end-of-generation token, then "\n\n".
    text = stdout.removesuffix("\n\n")
    return text.removesuffix(" [end of text]\n")


def speculative_text(stdout: str, prompt_text: str) -> str | None:
    # speculative-simple prints "\n\n", the prompt's pieces, the reply, then "\n\n" twice.
    head = "\n\n" + prompt_text
    if not stdout.startswith(head):
        return None
    return stdout[len(head):].removesuffix("\n\n\n\n")


def _plain_result(mode: str, cmd: list[str], stdout: str, stderr: str) -> NativeResult:
    runs, eval_ms, prompt_ms, sampling_ms = parse_completion_timings(stderr)
    # N sampled tokens take N - 1 one-token decodes (the first comes from the prompt's logits), as in SpecChat,
    # whose rate counts the tokens its decode steps produced over its decode wall time, sampling included.
    decode_ms = eval_ms + sampling_ms
    tps = runs / (decode_ms / 1000.0) if decode_ms > 0 else 0.0
    return NativeResult(mode, tuple(cmd), runs + 1, tps, decode_ms, prompt_ms, text=completion_text(stdout),
                        prompt_tokens=tuple(parse_prompt_tokens(stderr)), system_info=parse_system_info(stderr),
                        eval_tokens_per_second=runs / (eval_ms / 1000.0) if eval_ms > 0 else 0.0)


def _spec_result(mode: str, cmd: list[str], stdout: str, stderr: str, prompt_text: str) -> NativeResult:
    p = parse_speculative(stderr)
    speed = p["speed"] if math.isfinite(p["speed"]) else 0.0
    return NativeResult(mode, tuple(cmd), int(p["decoded"]), speed, p["decode_s"] * 1000.0, p["encode_s"] * 1000.0,
                        int(p["n_drafted"]), int(p["n_accept"]), speculative_text(stdout, prompt_text))


def check_prompt_tokens(ours: list[int], theirs: tuple[int, ...]) -> None:
    """Both engines must decode the same prompt, token for token."""
    if list(theirs) == list(ours):
        return
    i = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    a = ours[i] if i < len(ours) else None
    b = theirs[i] if i < len(theirs) else None
    raise NativeError(f"llama.cpp tokenized the prompt differently: {len(theirs)} tokens vs SpecChat's {len(ours)}, "
                      f"first difference at position {i} (llama.cpp {b}, SpecChat {a}); the timings would not "
                      "compare the same work")


def same_reply(ours: str, theirs: str | None) -> bool:
    """Greedy replies agree as far as both go (speculative-simple emits one token more than -n)."""
    if theirs is None:
        return False
    a, b = ours.rstrip("\ufffd"), theirs.rstrip("\ufffd")
    if not a or not b:  # an empty reply is a prefix of anything
        return a == b
    return a.startswith(b) or b.startswith(a)


def split_args(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text)) if text else ()


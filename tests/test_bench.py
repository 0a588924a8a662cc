"""`specchat bench`: prompt suites, fair round order, llama.cpp's output parsers, and real runs."""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.cli import bench as bench_mod
from app.cli import native_bench as nb
from app.cli.bench import BenchPrompt, NativePlan, load_prompts, round_order
from app.engine.events import FinishEvent, GenerationStats, GovernorEvent
from app.engine.parting import Batch, replay_row
from app.engine.session import GenParams
from tests.test_cli import specchat

NATIVE_BIN = Path(os.environ.get("SPECCHAT_NATIVE_BIN", "/work/native/build/bin"))

# Captured from llama.cpp 0.5.0-dev (commit 0c1e570, the vendored source of llama-cpp-python 0.3.36) on
# SmolLM2-135M-Instruct, -n 8 -c 512 -t 2 -fa on --temp 0 (timestamps and all, as its log prints them).
COMPLETION_STDERR = """\
0.00.242.125 I system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |
0.00.242.504 I llama_completion: prompt: '<|im_start|>system
You are a helpful AI assistant<|im_end|>
<|im_start|>assistant'
0.00.242.520 I llama_completion: number of tokens in prompt = 6
0.00.242.535 I      1 -> '<|im_start|>'
0.00.242.550 I   9690 -> 'system'
0.00.242.564 I    198 -> '
'
0.00.242.578 I   2683 -> 'You'
0.00.243.007 I      2 -> '<|im_end|>'
0.00.243.020 I    198 -> '
'
0.00.243.073 I
0.00.243.093 I sampler seed: 0
0.00.243.152 I generate: n_ctx = 512, n_batch = 512, n_predict = 8, n_keep = 0
0.00.994.873 I common_perf_print:    sampling time =       4.94 ms
0.00.994.888 I common_perf_print:    samplers time =       0.24 ms /    48 tokens
0.00.994.894 I common_perf_print:        load time =     128.98 ms
0.00.994.905 I common_perf_print: prompt eval time =     464.56 ms /    40 tokens (   11.61 ms per token,    86.10 tokens per second)
0.00.994.906 I common_perf_print:        eval time =     268.84 ms /     7 runs   (   38.41 ms per token,    26.04 tokens per second)
0.00.994.906 I common_perf_print:       total time =     752.94 ms /    47 tokens
"""  # noqa: E501

SPECULATIVE_STDERR = """\
0.01.210.782 I encoded   41 tokens in    0.481 seconds, speed:   85.325 t/s
0.01.210.783 I decoded    9 tokens in    0.404 seconds, speed:   22.266 t/s
0.01.210.783 I
0.01.210.784 I n_draft   = 3
0.01.210.784 I n_predict = 9
0.01.210.784 I n_drafted = 0
0.01.210.784 I n_accept  = 0
0.01.210.785 I accept    = -nan%
0.01.210.830 I common_perf_print:    samplers time =       0.28 ms /     9 tokens
0.01.210.836 I common_perf_print: prompt eval time =     623.44 ms /    43 tokens (   14.50 ms per token,    68.97 tokens per second)
0.01.210.837 I common_perf_print:        eval time =     327.79 ms /     8 runs   (   40.97 ms per token,    24.41 tokens per second)
"""  # noqa: E501

SPECULATIVE_DRAFT_STDERR = """\
1.17.929.250 I encoded   41 tokens in    5.994 seconds, speed:    6.840 t/s
1.17.929.273 I decoded    9 tokens in   62.448 seconds, speed:    0.144 t/s
1.17.929.287 I
1.17.929.302 I n_draft   = 6
1.17.929.316 I n_predict = 9
1.17.929.331 I n_drafted = 3
1.17.929.345 I n_accept  = 3
1.17.929.360 I accept    = 100.000%
"""

PROMPT_TEXT = "<|im_start|>user\nRepeat exactly: alpha beta<|im_end|>\n<|im_start|>assistant\n"
SPECULATIVE_STDOUT = "\n\n" + PROMPT_TEXT + "Repeat exactly: alpha beta gamma beta alpha beta\n\n\n\n"


# --- prompt suites ------------------------------------------------------------------------------------------


def test_load_prompts_with_prompt_and_messages_rows(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": "one", "kind": "code", "prompt": "Write hello world."},
        {"id": "two", "kind": "multi-turn", "n_predict": 300, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Write f()."},
            {"role": "assistant", "content": "def f(): pass"},
            {"role": "user", "content": "Add type hints and return the whole code."}]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    one, two = load_prompts(path)
    assert one == BenchPrompt("one", "Write hello world.", "code")
    assert one.chat() == [{"role": "user", "content": "Write hello world."}]
    assert (two.id, two.kind, two.n_predict) == ("two", "multi-turn", 300)
    assert two.prompt == "Add type hints and return the whole code."
    assert [m["role"] for m in two.chat()] == ["system", "user", "assistant", "user"]
    assert two.chat()[2] == {"role": "assistant", "content": "def f(): pass"}


@pytest.mark.parametrize(("row", "needle"), [
    ("not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"prompt": "x"}', 'missing "id"'),
    ('{"id": "b"}', 'exactly one of "prompt"'),
    ('{"id": "b", "prompt": "x", "messages": []}', 'exactly one of "prompt"'),
    ('{"id": "b", "prompt": ""}', '"prompt" must be a non-empty string'),
    ('{"id": "b", "messages": []}', '"messages" must be a non-empty list'),
    ('{"id": "b", "messages": [{"role": "user"}]}', 'messages[0] must be an object with a string "content"'),
    ('{"id": "b", "messages": [{"role": "bot", "content": "x"}]}', "messages[0] has role 'bot'"),
    ('{"id": "b", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}',
     "the last message must be the user's"),
    ('{"id": "b", "prompt": "x", "n_predict": 0}', '"n_predict" must be a positive integer'),
    ('{"id": "b", "prompt": "x", "kind": 3}', '"kind" must be a string'),
    ('{"id": "a", "prompt": "again"}', "id 'a' repeats line 1"),
])
def test_bad_rows_name_the_line_and_the_problem(tmp_path, row, needle):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "prompt": "fine"}\n' + row + "\n")
    with pytest.raises(ValueError) as info:
        load_prompts(path)
    assert f"{path}, line 2:" in str(info.value)
    assert needle in str(info.value)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no prompts"):
        load_prompts(empty)
    with pytest.raises(ValueError, match="Cannot read the prompts file"):
        load_prompts(tmp_path / "nope.jsonl")


def test_builtin_suite_keeps_its_prompts_and_adds_copying_edits():
    suite = {p.id: p for p in load_prompts(None)}
    for old in ("code-prime", "code-refactor", "json-record", "prose-explain", "edit-fix-typos"):
        assert old in suite
    assert all(p.kind for p in suite.values())
    multi = [p for p in suite.values() if p.kind == "multi-turn"]
    assert len(multi) >= 3
    for item in multi:  # the earlier answer is in the conversation, so the reply can copy it
        assert [role for role, _ in item.messages][-3:] == ["user", "assistant", "user"]
    long_edits = [p for p in suite.values() if p.kind == "edit" and (p.n_predict or 0) >= 300]
    assert len(long_edits) >= 2
    for item in long_edits:
        code = item.prompt.split("```python\n", 1)[1]
        assert len(code.splitlines()) >= 35


def test_heldout_suite_loads_and_shares_no_prompt_with_the_builtin_one():
    # The held-out prompts check drafting rules tuned on the built-in suite (docs/BENCHMARKS.md, run 19).
    path = Path(bench_mod.__file__).parent.parent / "data" / "bench_prompts_heldout.jsonl"
    heldout = load_prompts(path)
    builtin = load_prompts(None)
    assert len(heldout) >= 12 and all(p.kind for p in heldout)
    assert not {p.id for p in heldout} & {p.id for p in builtin}
    assert not {p.chat()[-1]["content"] for p in heldout} & {p.chat()[-1]["content"] for p in builtin}
    assert {"json", "csv", "edit", "multi-turn"} <= {p.kind for p in heldout}


def test_long_context_suite_loads_and_fills_most_of_a_4096_context():
    # Prompts of 1.5k and 3k tokens (docs/BENCHMARKS.md, run 36): decode speed against llama.cpp where attention
    # over a long context, not the weights, takes a growing share of each step.
    path = Path(bench_mod.__file__).parent.parent / "data" / "bench_prompts_long.jsonl"
    long = load_prompts(path)
    builtin = load_prompts(None)
    assert [p.id for p in long] == ["long-summarise", "long-edit"]
    assert not {p.id for p in long} & {p.id for p in builtin}
    for item in long:
        assert item.n_predict and len(item.prompt) > 5000  # about 4 characters a token: over 1.2k tokens
        assert "```python\n" in item.prompt


# --- round order --------------------------------------------------------------------------------------------


def test_round_r_starts_with_mode_r_mod_n():
    modes = ["none", "lookup", "draft", "llama.cpp:plain"]
    assert round_order(modes, 0) == modes
    assert round_order(modes, 1) == ["lookup", "draft", "llama.cpp:plain", "none"]
    assert round_order(modes, 3) == ["llama.cpp:plain", "none", "lookup", "draft"]
    assert round_order(modes, 4) == modes
    assert sorted(round_order(modes, r)[0] for r in range(4)) == sorted(modes)


def _finish(mode: str, tps: float, tokens: tuple[int, ...] = (5, 6, 7), margins: tuple[float, ...] = ()) -> FinishEvent:
    governor = (GovernorEvent(1, "disable", 3, 0, "drafting costs more than it saves"),) if mode == "draft" else ()
    stats = GenerationStats(
        mode=mode, n_prompt_tokens=3, n_tokens=len(tokens), tokens_per_second=tps, prompt_tokens_per_second=100.0,
        prefill_ms=1.0, decode_ms=100.0, draft_ms=0.0, verify_ms=90.0, other_ms=10.0, steps=3, drafted=4,
        accepted=2, acceptance_rate=0.5, mean_accepted_length=1.0, tokens_per_step=1.0, per_position_acceptance=(),
        accepted_length_histogram=(), governor=governor, finish_reason="length", final_k=0,
        speculation_active=False, python_ms=1.0)
    return FinishEvent("abc", (1, 2, 3), tokens, stats, margins)


class _FakeSession:
    cleared = 0

    def chat_prompt(self, messages: Any) -> list[int]:
        return [1, 2, 3]

    def clear_caches(self) -> None:
        self.cleared += 1


class _FakeNative(NativePlan):
    def __init__(self, calls: list[tuple[str, bool]], modes: tuple[str, ...] = ("plain", "ngram-simple"),
                 speeds: dict[str, list[float]] | None = None) -> None:
        super().__init__(settings=None, modes=list(modes), workdir=Path("."))  # type: ignore[arg-type]
        self.calls = calls
        self.speeds = speeds or {}  # per mode, the rate of each successive run

    def run(self, mode: str, session: Any, messages: Any, tokens: list[int], n_predict: int,
            name: str) -> nb.NativeResult:
        self.calls.append((nb.PREFIX + mode, False))
        queue = self.speeds.get(mode)
        tps = queue.pop(0) if queue else 10.0 if mode == "plain" else 15.0
        drafts = mode not in nb.PLAIN_MODES
        return nb.NativeResult(mode, ("tool",), 4, tps, 100.0, 5.0, 6 if drafts else 0, 3 if drafts else 0, "abc")


def test_bench_rotates_modes_and_times_without_margins(monkeypatch):
    calls: list[tuple[str, bool]] = []
    speeds = {"none": 20.0, "lookup": 30.0, "draft": 10.0}

    def fake_run_once(session: Any, prompt: list[int], params: GenParams) -> FinishEvent:
        calls.append((params.mode, params.track_margins))
        return _finish(params.mode, speeds[params.mode], margins=(1.0, 1.0, 1.0) if params.track_margins else ())

    monkeypatch.setattr(bench_mod, "run_once", fake_run_once)
    monkeypatch.setattr(bench_mod, "run_recorded",
                        lambda session, prompt, params: bench_mod.Recorded(fake_run_once(session, prompt, params), ()))
    native = _FakeNative(calls)
    items = [BenchPrompt("p", "x", "edit", n_predict=50)]
    session = _FakeSession()
    runs = list(bench_mod.bench(session, items, GenParams("none", 16), ["lookup", "draft"], repeat=3,  # type: ignore[arg-type]
                                native=native, warmup=True, fixed_n_predict=False))
    order = ["none", "lookup", "draft", "llama.cpp:plain", "llama.cpp:ngram-simple"]
    warmup, reference, timed = calls[:5], calls[5], calls[6:]
    assert [m for m, _ in warmup] == order and not any(t for _, t in warmup)
    assert reference == ("none", True)  # the one run that tracks margins
    assert session.cleared == 1  # the reference prefills the whole prompt, as llama.cpp's runs do
    assert [m for m, _ in timed] == round_order(order, 0) + round_order(order, 1) + round_order(order, 2)
    assert not any(t for _, t in timed)
    assert [r.mode for r in runs] == order
    by_mode = {r.mode: r for r in runs}
    assert by_mode["none"].speedup == pytest.approx(1.0)
    assert by_mode["lookup"].speedup == pytest.approx(1.5)
    assert by_mode["lookup"].speedup_vs_llama_cpp == pytest.approx(3.0)
    assert by_mode["llama.cpp:ngram-simple"].speedup == pytest.approx(0.75)
    assert by_mode["llama.cpp:ngram-simple"].speedup_vs_llama_cpp == pytest.approx(1.5)
    assert by_mode["llama.cpp:ngram-simple"].acceptance_rate == pytest.approx(0.5)
    assert by_mode["llama.cpp:ngram-simple"].engine == "llama.cpp"
    assert by_mode["llama.cpp:plain"].identical and by_mode["llama.cpp:plain"].engine_overhead is None
    assert all(r.n_predict == 50 for r in runs)  # the row's own budget: -n was not given
    assert by_mode["draft"].governor_by_round == [[{"step": 1, "action": "disable", "k_before": 3, "k_after": 0,
                                                    "reason": "drafting costs more than it saves",
                                                    "scope": "draft"}]] * 3
    summary = bench_mod.summarise(runs)
    assert summary["llama.cpp:plain"]["median_engine_overhead"] is None
    assert summary["lookup"]["median_speedup_vs_llama_cpp"] == pytest.approx(3.0)
    report = {"settings": {"n_ctx": 512, "flash_attn": True, "repack": False, "repeat": 3, "warmup": True},
              "native": {"n_threads": 2, "same_build_features": False, "system_info": "CPU : AVX2 = 1",
                         "specchat_system_info": "CPU : AVX512 = 1"}, "summary": summary}
    text = bench_mod.format_report(runs, report)
    assert "vs cpp" in text and "WARNING: the builds differ" in text and "CPU repacking off" in text
    assert "llama.cpp:ngram-simple" in text and "3.00x" in text
    assert "Noise floor" not in text  # no A/A control was run


def test_bench_reports_the_noise_floor_of_llama_cpp_against_itself(monkeypatch):
    """plain-again: llama-completion once more in every round; its per-prompt medians against plain bound the noise."""
    monkeypatch.setattr(bench_mod, "run_recorded", lambda session, prompt, params: bench_mod.Recorded(
        _finish(params.mode, 20.0, margins=(1.0, 1.0, 1.0) if params.track_margins else ()), ()))
    monkeypatch.setattr(bench_mod, "run_once", lambda session, prompt, params: _finish(
        params.mode, 20.0, margins=(1.0, 1.0, 1.0) if params.track_margins else ()))
    # Three rounds per prompt: p1's control runs at 0.9, 1.0, 1.1 of plain (median 1.0), p2's at 0.9 throughout.
    speeds = {"plain": [10.0] * 6, "plain-again": [9.0, 10.0, 11.0, 9.0, 9.0, 9.0]}
    native = _FakeNative([], ("plain", "plain-again"), speeds)
    items = [BenchPrompt("p1", "x", "code"), BenchPrompt("p2", "y", "code")]
    runs = list(bench_mod.bench(_FakeSession(), items, GenParams("none", 16), [], repeat=3,  # type: ignore[arg-type]
                                native=native))
    control = {r.prompt_id: r for r in runs if r.mode == "llama.cpp:plain-again"}
    assert control["p1"].speedup_vs_llama_cpp == pytest.approx(1.0)
    assert control["p2"].speedup_vs_llama_cpp == pytest.approx(0.9)
    assert control["p1"].drafted == 0 and control["p1"].identical
    summary = bench_mod.summarise(runs)
    assert summary["llama.cpp:plain-again"]["min_speedup_vs_llama_cpp"] == pytest.approx(0.9)
    assert summary["llama.cpp:plain-again"]["max_speedup_vs_llama_cpp"] == pytest.approx(1.0)
    report = {"settings": {"n_ctx": 512, "flash_attn": True, "repack": True, "repeat": 3, "warmup": False},
              "native": {"n_threads": 2, "same_build_features": True, "system_info": "CPU",
                         "specchat_system_info": "CPU"},
              "summary": summary}
    text = bench_mod.format_report(runs, report)
    assert "Noise floor: llama.cpp plain, run again in every round, scored 0.90-1.00x of itself" in text
    # p2's three rounds agree exactly, so its interval is a point; p1's spread over 0.9-1.1 leaves it wide open.
    assert control["p2"].vs_llama_cpp_interval == pytest.approx([0.9, 0.9, 0.9])
    low, mean, high = control["p1"].vs_llama_cpp_interval
    assert low < 0.85 and high > 1.15 and mean == pytest.approx((0.9 * 1.0 * 1.1) ** (1 / 3))
    assert "95% = the interval" in text and "0.90-0.90" in text


def test_ratio_interval_is_a_t_interval_on_the_log_ratios():
    ratios = [0.9, 1.0, 1.1, 0.95]
    logs = [math.log(r) for r in ratios]
    half = 3.182 * statistics.stdev(logs) / 2  # t(3), n = 4
    low, mean, high = bench_mod.ratio_interval(ratios)
    assert mean == pytest.approx(math.exp(statistics.fmean(logs)))
    assert (low, high) == (pytest.approx(mean * math.exp(-half)), pytest.approx(mean * math.exp(half)))
    assert bench_mod.ratio_interval([1.2]) is None  # one round: no spread to judge the noise by
    many = bench_mod.ratio_interval([1.0, 1.02] * 20)  # 40 rounds: the normal quantile
    assert many[2] / many[1] == pytest.approx(math.exp(1.96 * statistics.stdev([0.0, math.log(1.02)] * 20)
                                                       / math.sqrt(40)))


# --- llama.cpp's tools: commands and parsers ----------------------------------------------------------------


def _settings(**kw: Any) -> nb.NativeSettings:
    base: dict[str, Any] = dict(
        bin_dir=Path("/opt/llama"), target=Path("t.gguf"), draft=Path("d.gguf"), n_ctx=4096, n_threads=2,
        n_batch=512, flash_attn=True, repack=False, n_gpu_layers=-1, n_gpu_layers_draft=-1, type_k="f16",
        type_v="f16", temp=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=None, draft_max=6, p_min=0.75)
    base.update(kw)
    return nb.NativeSettings(**base)


def test_commands_share_specchat_settings():
    plain = nb.command("plain", _settings(), Path("p.txt"), 128)
    assert plain[0] == "/opt/llama/llama-completion"
    for flag in ("-no-cnv", "--verbose-prompt", "--no-display-prompt", "--no-escape", "--no-repack"):
        assert flag in plain
    assert plain[plain.index("-n") + 1] == "128" and plain[plain.index("-c") + 1] == "4096"
    assert plain[plain.index("-t") + 1] == "2" and plain[plain.index("-fa") + 1] == "on"
    assert plain[plain.index("--temp") + 1] == "0.0" and plain[plain.index("-f") + 1] == "p.txt"
    assert "--seed" not in plain
    # The A/A control is the very same command: its ratio to plain measures nothing but the machine's noise.
    assert nb.command("plain-again", _settings(), Path("p.txt"), 128) == plain
    draft = nb.command("draft-simple", _settings(repack=True, seed=7), Path("p.txt"), 64)
    assert draft[0] == "/opt/llama/llama-speculative-simple"
    assert draft[draft.index("--spec-type") + 1] == "draft-simple" and draft[draft.index("-md") + 1] == "d.gguf"
    assert draft[draft.index("--spec-draft-n-max") + 1] == "6" and draft[draft.index("--seed") + 1] == "7"
    assert "--repack" in draft and "-no-cnv" not in draft
    long = nb.command("ngram-simple", _settings(), Path("p.txt"), 64, n_prompt=900)
    assert long[long.index("-b") + 1] == "900" and long[long.index("-ub") + 1] == "512"
    ngram = nb.command("ngram-map-k", _settings(extra_args=("--spec-ngram-map-k-size-n", "3")), Path("p.txt"), 64)
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-map-k" and "-md" not in ngram
    assert ngram[-2:] == ["--spec-ngram-map-k-size-n", "3"]
    # Every n-gram type speculative-simple knows, llama.cpp's own `--spec-default` (ngram-mod) among them, runs
    # with llama.cpp's own sizes and without the draft model.
    for mode in ("ngram-map-k4v", "ngram-mod", "ngram-cache"):
        spec = nb.command(mode, _settings(), Path("p.txt"), 64)
        assert spec[0] == "/opt/llama/llama-speculative-simple" and "-md" not in spec
        assert spec[spec.index("--spec-type") + 1] == mode and not any(a.startswith("--spec-ngram") for a in spec)
    # The target's own MTP head: no draft model, SpecChat's K and p_min.
    mtp = nb.command("draft-mtp", _settings(draft=None), Path("p.txt"), 64)
    assert mtp[0] == "/opt/llama/llama-speculative-simple" and "-md" not in mtp
    assert mtp[mtp.index("--spec-type") + 1] == "draft-mtp" and mtp[mtp.index("--spec-draft-n-max") + 1] == "6"
    assert "--spec-draft-p-min" in mtp
    with pytest.raises(nb.NativeError, match="needs a draft model"):
        nb.command("draft-simple", _settings(draft=None), Path("p.txt"), 8)
    with pytest.raises(nb.NativeError, match="Unknown llama.cpp mode"):
        nb.command("lookahead", _settings(), Path("p.txt"), 8)


def test_parse_completion_output():
    assert nb.parse_prompt_tokens(COMPLETION_STDERR) == [1, 9690, 198, 2683, 2, 198]
    assert nb.parse_completion_timings(COMPLETION_STDERR) == (7, 268.84, 464.56, 4.94)
    without_prefix = "\n".join(line[15:] if line[:1].isdigit() else line for line in COMPLETION_STDERR.splitlines())
    assert nb.parse_prompt_tokens(without_prefix) == [1, 9690, 198, 2683, 2, 198]
    result = nb._plain_result("plain", ["llama-completion"], "Repeat exactly: alpha beta\n\n", COMPLETION_STDERR)
    # Sampling counts, as it does in SpecChat's rate; llama_decode alone is kept beside it.
    assert result.tokens_per_second == pytest.approx(7 / (0.26884 + 0.00494))
    assert result.eval_tokens_per_second == pytest.approx(7 / 0.26884)
    assert (result.n_tokens, result.text) == (8, "Repeat exactly: alpha beta")
    assert result.system_info == ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
                                  "AVX512 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1")
    assert nb.completion_text("Hi there. [end of text]\n\n\n") == "Hi there."
    with pytest.raises(ValueError, match="eval time"):
        nb.parse_completion_timings("nothing useful")
    with pytest.raises(ValueError, match="announced 6 prompt tokens but listed 5"):
        nb.parse_prompt_tokens(COMPLETION_STDERR.replace("   2683 -> 'You'", "   2683 -- 'You'"))


def test_parse_speculative_output():
    p = nb.parse_speculative(SPECULATIVE_STDERR)
    assert (p["decoded"], p["decode_s"], p["speed"], p["encode_s"]) == (9, 0.404, 22.266, 0.481)
    assert (p["n_drafted"], p["n_accept"], p["n_draft"]) == (0, 0, 3)
    result = nb._spec_result("ngram-simple", ["x"], SPECULATIVE_STDOUT, SPECULATIVE_STDERR, PROMPT_TEXT)
    assert (result.n_tokens, result.tokens_per_second, result.decode_ms) == (9, 22.266, pytest.approx(404.0))
    assert result.text == "Repeat exactly: alpha beta gamma beta alpha beta"
    d = nb._spec_result("draft-simple", ["x"], SPECULATIVE_STDOUT, SPECULATIVE_DRAFT_STDERR, PROMPT_TEXT)
    assert (d.n_drafted, d.n_accepted, d.tokens_per_second) == (3, 3, 0.144)
    assert nb.speculative_text("other output", PROMPT_TEXT) is None
    with pytest.raises(ValueError, match="decoded N tokens"):
        nb.parse_speculative("0.00.1 I encoded 4 tokens in 0.1 seconds")


def test_prompt_token_check_and_reply_comparison(tmp_path):
    nb.check_prompt_tokens([1, 2, 3], (1, 2, 3))
    with pytest.raises(nb.NativeError, match="position 2 \\(llama.cpp 4, SpecChat 3\\)"):
        nb.check_prompt_tokens([1, 2, 3], (1, 2, 4))
    with pytest.raises(nb.NativeError, match="2 tokens vs SpecChat's 3"):
        nb.check_prompt_tokens([1, 2, 3], (1, 2))
    path = tmp_path / "p.txt"
    nb.write_prompt(path, "ends with a newline\n")
    assert path.read_text() == "ends with a newline\n\n"  # -f drops exactly one
    assert nb.same_reply("alpha beta", "alpha beta gamma")
    assert not nb.same_reply("alpha beta", "alpha gamma")
    assert not nb.same_reply("alpha", "") and not nb.same_reply("alpha", None)


def test_missing_tools_are_a_clear_error(tmp_path):
    with pytest.raises(nb.NativeError, match="llama-completion is missing.*BENCHMARKS.md"):
        nb.tool_paths(tmp_path)


def test_failing_tool_names_itself_and_shows_stderr(tmp_path):
    for tool in (nb.COMPLETION, nb.SPECULATIVE):
        script = tmp_path / tool
        script.write_text("#!/bin/sh\necho 'error: failed to load model' >&2\nexit 1\n")
        script.chmod(0o755)
    with pytest.raises(nb.NativeError) as info:
        nb.run("plain", _settings(bin_dir=tmp_path), tmp_path / "p.txt", 8, "x")
    assert "llama-completion (plain) exited with status 1" in str(info.value)
    assert "failed to load model" in str(info.value)


# --- real runs ----------------------------------------------------------------------------------------------


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [{"id": "echo", "kind": "edit", "n_predict": 8,
             "prompt": "Repeat exactly: alpha beta gamma delta alpha beta gamma delta"},
            {"id": "turns", "kind": "multi-turn", "n_predict": 6, "messages": [
                {"role": "user", "content": "Say one colour."}, {"role": "assistant", "content": "Blue."},
                {"role": "user", "content": "Repeat your answer."}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_cli_multi_turn_rows_and_new_fields(smol_path, tmp_path):
    out = tmp_path / "reports" / "bench.json"
    out.parent.mkdir()
    result = specchat("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none,lookup",
                      "--repeat", 2, "-c", 512, "--json-out", out, home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert json.loads(out.read_text()) == data  # --json-out writes the same report
    runs = data["runs"]
    assert [(r["prompt_id"], r["mode"]) for r in runs] == [("echo", "none"), ("echo", "lookup"),
                                                           ("turns", "none"), ("turns", "lookup")]
    for run in runs:
        assert run["engine"] == "specchat" and len(run["rounds_tps"]) == 2 and len(run["governor_by_round"]) == 2
        assert run["n_predict"] == (8 if run["prompt_id"] == "echo" else 6)
        assert 0 < run["tokens"] <= run["n_predict"] and run["prompt_tokens"] > 5
        assert run["speedup_vs_llama_cpp"] is None and run["command"] is None
        assert run["identical"] or run["divergence"]["near_tie"]
    assert runs[2]["kind"] == "multi-turn"
    assert data["settings"]["repeat"] == 2 and data["settings"]["warmup"] is True
    assert data["settings"]["processes"] == "shared"  # without --native, "auto" keeps every run in process
    assert "specchat" in data["measurement"] and "native" not in data
    # The settings' "auto" long copies, as this machine ran them: K up to 31, sure copies only on a CPU build.
    assert data["settings"]["spec"]["copy_max"] == 31 and data["settings"]["spec"]["sure_copies"] is True


def test_bench_cli_compares_sampled_replies_only_with_a_seed(smol_path, tmp_path):
    """Coupled sampling gives a seeded reply whatever the drafts, so the bench checks it as it checks greedy ones;
    without a seed each run draws its own random numbers and the column says so instead of claiming "yes"."""
    args = ("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none,lookup", "--repeat", 1,
            "--no-warmup", "-c", 512, "--sampling", "custom", "--temp", "0.9", "--top-k", "40", "--top-p", "0.95")
    seeded = specchat(*args, "--seed", 11, home=tmp_path)
    assert seeded.returncode == 0, seeded.stderr
    data = json.loads(seeded.stdout)
    assert [r["identical"] for r in data["runs"]] == [True] * 4, data["runs"]
    assert data["summary"]["lookup"]["compared"] == data["summary"]["lookup"]["identical"] == 2
    fresh = specchat(*args, home=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    data = json.loads(fresh.stdout)
    assert [r["identical"] for r in data["runs"]] == [None] * 4 and data["summary"]["lookup"]["compared"] == 0
    text = specchat(*args[:3], *args[4:], home=tmp_path)  # the table instead of --json
    assert text.returncode == 0, text.stderr
    assert "n/a (sampled without --seed)" in text.stdout and "identical n/a" in text.stdout


def test_bench_cli_native_without_tools_fails_before_loading(smol_path, tmp_path):
    result = specchat("bench", "--prompts", _suite(tmp_path), "-m", smol_path, "--native", tmp_path, home=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "llama-completion is missing" in result.stderr


@pytest.mark.skipif(not (NATIVE_BIN / nb.COMPLETION).is_file() or not (NATIVE_BIN / nb.SPECULATIVE).is_file(),
                    reason=f"llama.cpp's tools are not built in {NATIVE_BIN} (set SPECCHAT_NATIVE_BIN; see "
                           "docs/BENCHMARKS.md, \"Comparing with llama.cpp itself\")")
def test_bench_cli_native_smoke(smol_path, tmp_path):
    result = specchat("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none",
                      "--native", NATIVE_BIN, "--native-modes", "plain,plain-again,ngram-simple,ngram-mod",
                      "--repeat", 1, "--no-warmup", "-c", 512, home=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    modes = [(r["prompt_id"], r["mode"]) for r in data["runs"]]
    assert modes == [(p, m) for p in ("echo", "turns")
                     for m in ("none", "llama.cpp:plain", "llama.cpp:plain-again", "llama.cpp:ngram-simple",
                               "llama.cpp:ngram-mod")]
    for run in data["runs"]:
        assert run["tokens_per_second"] > 0 and run["speedup_vs_llama_cpp"] > 0
        if run["engine"] == "llama.cpp":
            assert run["command"][0].endswith(("llama-completion", "llama-speculative-simple"))
            assert "-no-cnv" in run["command"] or "--spec-type" in run["command"]
    plain = [r for r in data["runs"] if r["mode"] in ("llama.cpp:plain", "llama.cpp:plain-again")]
    assert all(r["identical"] for r in plain), plain  # greedy, same prompt tokens (the bench checks them)
    assert all(r["command"][0].endswith("llama-completion") for r in plain)
    assert data["native"]["prompt_tokens_checked"]
    assert data["native"]["modes"] == ["plain", "plain-again", "ngram-simple", "ngram-mod"]
    assert data["settings"]["processes"] == "fresh"  # with --native, "auto" runs SpecChat as llama.cpp runs
    assert data["native"]["system_info"].startswith("CPU") and isinstance(data["native"]["same_build_features"], bool)
    assert data["summary"]["llama.cpp:plain"]["median_speedup_vs_llama_cpp"] == pytest.approx(1.0)
    # (tests/test_native_replay.py runs the same through the research bench, replaying llama.cpp's n-gram types.)


# --- timed runs in fresh processes (--processes fresh) --------------------------------------------------------


def test_bench_cli_fresh_processes_match_the_reference(smol_path, tmp_path):
    """Each timed run happens in a child `specchat bench-run`; its greedy reply must still be the parent's."""
    result = specchat("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none,lookup",
                      "--repeat", 1, "--no-warmup", "--processes", "fresh", "-c", 512, home=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["settings"]["processes"] == "fresh"
    assert [(r["prompt_id"], r["mode"]) for r in data["runs"]] == [(p, m) for p in ("echo", "turns")
                                                                   for m in ("none", "lookup")]
    for run in data["runs"]:
        assert run["tokens"] > 0 and run["tokens_per_second"] > 0
        assert run["identical"] or run["divergence"]["near_tie"], run


def test_child_loads_the_draft_only_for_modes_that_use_it():
    from app.cli.bench_child import child_config
    from app.engine.pair_config import PairConfig

    cfg = PairConfig(Path("t.gguf"), Path("d.gguf"))
    assert child_config(cfg, "none").draft is None and child_config(cfg, "lookup").draft is None
    assert child_config(cfg, "draft").draft == Path("d.gguf") and child_config(cfg, "hybrid").draft == Path("d.gguf")
    assert child_config(cfg, "none").force  # the parent already checked the pair fits


def test_failed_child_names_the_run_and_shows_its_error(tmp_path):
    from app.cli.bench_child import Request, run_in_child
    from app.engine.pair_config import PairConfig

    missing = tmp_path / "gone.gguf"
    request = Request(PairConfig(missing), (1, 2, 3), GenParams("none", 4), (1, 2), 2)
    with pytest.raises(RuntimeError) as err:
        run_in_child(request, tmp_path, "p-none-0", timeout_s=300)
    text = str(err.value)
    assert "p-none-0" in text and "failed in its own process" in text and "gone.gguf" in text


# --- partings measured against the target's own rounding ------------------------------------------------------


def test_rounding_check_recomputes_the_gap_three_ways(smol_session):
    import numpy as np

    from app.cli import rounding_check

    prompt = smol_session.chat_prompt([{"role": "user", "content": "Name three colours."}])
    smol_session.clear_caches()
    reference = bench_mod.run_once(smol_session, prompt, GenParams("none", 12, track_margins=True))
    pos = 6
    ctx = smol_session.target_ctx
    smol_session.clear_caches()
    ctx.decode(prompt, logits_for="last")
    for token in reference.tokens[:pos]:
        ctx.decode([token], logits_for="last")
    runner_up = int(np.argsort(ctx.logits(-1))[-2])
    check = rounding_check.measure(smol_session, prompt, reference.tokens, pos, reference.tokens[pos], runner_up)
    # One token at a time is plain decoding's own path: its gap is the reference run's top-two margin.
    assert check.gaps["one_token"] == pytest.approx(reference.margins[pos], abs=1e-4)
    assert "one_pass" in check.gaps and any(k.startswith("batch_") for k in check.gaps) and len(check.gaps) == 3
    assert check.spread == pytest.approx(max(check.gaps.values()) - min(check.gaps.values()))
    assert check.within == (abs(check.gaps["one_token"]) < check.spread)
    assert ctx.n_past == 0  # the check leaves the caches empty, as the next reference run expects


def test_report_names_a_parting_within_measured_rounding():
    from types import SimpleNamespace

    d = {"position": 31, "plain_token": 1, "spec_token": 2, "margin": 0.165, "near_tie": False}
    real = SimpleNamespace(identical=False, engine="specchat", divergence=d)
    assert "REAL DIFFERENCE" in bench_mod._same_column(real)  # type: ignore[arg-type]
    within = SimpleNamespace(identical=False, engine="specchat",
                             divergence={**d, "rounding": {"gaps": {}, "spread": 0.224, "within": True}})
    assert "within measured rounding" in bench_mod._same_column(within)  # type: ignore[arg-type]
    beyond = SimpleNamespace(identical=False, engine="specchat",
                             divergence={**d, "rounding": {"gaps": {}, "spread": 0.01, "within": False}})
    assert "REAL DIFFERENCE" in bench_mod._same_column(beyond)  # type: ignore[arg-type]


def test_only_partings_above_the_near_tie_line_are_measured(smol_session):
    from app.cli.bench import BenchRun

    prompt = smol_session.chat_prompt([{"role": "user", "content": "Name three colours."}])
    smol_session.clear_caches()
    reference = bench_mod.run_once(smol_session, prompt, GenParams("none", 8, track_margins=True))
    d = {"position": 3, "plain_token": reference.tokens[3], "spec_token": reference.tokens[3] + 1,
         "margin": 0.5, "near_tie": False}
    run = BenchRun("p", "lookup", 8, 10.0, 1.0, 0.5, 1.0, False, d, 0.0)
    measured = bench_mod._with_rounding_check(run, smol_session, prompt, reference)
    assert set(measured.divergence["rounding"]) == {"gaps", "spread", "within", "reproduced"}
    assert measured.divergence["rounding"]["gaps"]["one_token"] > 0  # the plain token leads where it was chosen
    near = BenchRun("p", "lookup", 8, 10.0, 1.0, 0.5, 1.0, False, {**d, "near_tie": True}, 0.0)
    assert "rounding" not in bench_mod._with_rounding_check(near, smol_session, prompt, reference).divergence
    assert bench_mod._with_rounding_check(replace(run, identical=True, divergence=None), smol_session, prompt,
                                          reference).divergence is None


# --- the speculative run's own batches, replayed ---------------------------------------------------------------

_COPY_PROMPT = [{"role": "user", "content": "Repeat this line three times: the quick brown fox jumps over the lazy "
                                            "dog and runs into the old green forest."}]


def _recorded_lookup(session, n=48):
    from app.cli.bench_child import run_recorded

    prompt = session.chat_prompt(_COPY_PROMPT)
    session.clear_caches()
    return prompt, run_recorded(session, prompt, GenParams("lookup", n))


def _replay_row(session, prompt, reply, steps, position):
    """The bench's replay of a run's batches: a fresh prefill (rounding_check.prefilled), then the engine's one
    replay_row, as rounding_check.measure runs them."""
    from app.cli import rounding_check

    ctx = rounding_check.prefilled(session, prompt)
    return replay_row(ctx, len(prompt), [*prompt, *reply], steps, position)


def test_replaying_a_runs_batches_gives_its_own_choice_at_every_row(smol_session):
    import numpy as np

    prompt, rec = _recorded_lookup(smol_session)
    reply = rec.finish.tokens
    multi = [b for b in rec.steps if b.accepted > 0]
    assert multi, "the copy prompt must give the replay verify batches of several rows"
    assert sum(b.accepted + 1 for b in rec.steps if not b.from_prompt) + 1 >= len(reply)
    for position in range(0, len(reply), 3):
        row = _replay_row(smol_session, prompt, reply, rec.steps, position)
        assert int(np.argmax(row)) == reply[position], f"replay at {position} is not the run's own choice"
    # A layout that is not this reply's is refused, not silently replayed.
    b = multi[0]
    wrong = [Batch(b.position, tuple(t + 1 for t in b.drafted), b.accepted, False)]
    with pytest.raises(ValueError, match="not the reply's tokens"):
        _replay_row(smol_session, prompt, reply, [*rec.steps[:rec.steps.index(b)], *wrong], b.position + b.accepted)
    with pytest.raises(ValueError, match="do not reach"):
        _replay_row(smol_session, prompt, reply, rec.steps[:1], len(reply) - 1)


def test_a_parting_is_reproduced_only_when_the_replay_picks_the_speculative_token(smol_session):
    import numpy as np

    from app.cli import rounding_check

    prompt, rec = _recorded_lookup(smol_session)
    reply = rec.finish.tokens
    b = next(b for b in rec.steps if b.accepted > 1)
    position = b.position + 1  # inside a verify batch of several rows
    row = _replay_row(smol_session, prompt, reply, rec.steps, position)
    other = int(np.argsort(row)[-2])
    # Call the run's own token the speculative one: its batches reproduce it.
    own = rounding_check.measure(smol_session, prompt, reply, position, other, reply[position], rec.steps)
    assert own.reproduced is True and own.gaps["engine_batches"] < 0
    # The other way round, the replay does not pick the supposed speculative token.
    swapped = rounding_check.measure(smol_session, prompt, reply, position, reply[position], other, rec.steps)
    assert swapped.reproduced is False and swapped.gaps["engine_batches"] > 0
    assert rounding_check.measure(smol_session, prompt, reply, position, reply[position], other).reproduced is None


def test_report_says_whether_the_runs_batches_reproduce_a_parting():
    from types import SimpleNamespace

    d = {"position": 31, "plain_token": 1, "spec_token": 2, "margin": 0.165, "near_tie": False}
    gaps = {"one_token": 0.165, "engine_batches": -0.02}
    yes = SimpleNamespace(identical=False, engine="specchat",
                          divergence={**d, "rounding": {"gaps": gaps, "spread": 0.185, "within": True,
                                                        "reproduced": True}})
    assert "the target's own choice in the run's batches" in bench_mod._same_column(yes)  # type: ignore[arg-type]
    no = SimpleNamespace(identical=False, engine="specchat",
                         divergence={**d, "rounding": {"gaps": {**gaps, "engine_batches": 0.2}, "spread": 0.3,
                                                       "within": True, "reproduced": False}})
    assert "REAL DIFFERENCE" in bench_mod._same_column(no)  # type: ignore[arg-type]


# --- llama-server, loaded once for the bench (server-plain) -----------------------------------------------------


def test_server_command_shares_specchat_settings():
    from app.cli.native_server import server_command

    cmd = server_command(_settings(repack=True, n_gpu_layers=0), 8123)  # bin_dir /opt/llama
    assert cmd[0] == "/opt/llama/llama-server"
    for flag, value in (("-m", "t.gguf"), ("-c", "4096"), ("-t", "2"), ("-tb", "2"), ("-fa", "on"), ("-ngl", "0"),
                        ("-ctk", "f16"), ("-np", "1"), ("--cache-ram", "0"), ("--port", "8123"), ("-ub", "512")):
        assert cmd[cmd.index(flag) + 1] == value, flag
    assert "--repack" in cmd and "--no-cache-prompt" in cmd and "--no-webui" in cmd


def test_bench_cli_server_plain_without_the_server_fails_before_loading(smol_path, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in (nb.COMPLETION, nb.SPECULATIVE):  # the one-shot tools are there, llama-server is not
        (tools / name).write_text("#!/bin/sh\nexit 1\n")
        (tools / name).chmod(0o755)
    result = specchat("bench", "--prompts", _suite(tmp_path), "-m", smol_path, "--native", tools,
                      "--native-modes", "plain,server-plain", home=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "llama-server is missing" in result.stderr and "build the llama-server target" in result.stderr


@pytest.mark.skipif(not (NATIVE_BIN / nb.COMPLETION).is_file() or not (NATIVE_BIN / "llama-server").is_file(),
                    reason=f"llama.cpp's tools (llama-server among them) are not built in {NATIVE_BIN} (set "
                           "SPECCHAT_NATIVE_BIN; see docs/BENCHMARKS.md, \"Comparing with llama.cpp itself\")")
def test_bench_cli_server_plain_smoke(smol_path, tmp_path):
    """A real llama-server, loaded once for two rounds in the bench's process: greedy, on the same prompt tokens, it
    writes SpecChat's plain reply; every SpecChat row gets its ratio to it; the server is gone afterwards."""
    import psutil

    result = specchat("bench", "--prompts", _suite(tmp_path), "--json", "-m", smol_path, "--modes", "none,lookup",
                      "--native", NATIVE_BIN, "--native-modes", "plain,server-plain", "--repeat", 2, "--no-warmup",
                      "-c", 512, "--processes", "shared", home=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    served = [r for r in data["runs"] if r["mode"] == "llama.cpp:server-plain"]
    assert [r["prompt_id"] for r in served] == ["echo", "turns"]
    for run in served:
        assert run["identical"] is True, run  # the server decoded the prompt ids SpecChat sent, greedy
        assert run["command"][0].endswith("llama-server") and run["command"][-1] == "POST /completion"
        assert len(run["rounds_tps"]) == 2 and all(t > 0 for t in run["rounds_tps"])
        assert run["speedup_vs_llama_server"] == pytest.approx(1.0)
    for run in data["runs"]:
        if run["mode"] in ("none", "lookup"):
            low, _mean, high = run["vs_llama_server_interval"]
            assert run["speedup_vs_llama_server"] > 0 and low <= high
    assert data["summary"]["none"]["median_speedup_vs_llama_server"] > 0
    port = served[0]["command"][served[0]["command"].index("--port") + 1]
    left = [p for p in psutil.process_iter(["cmdline"]) if "llama-server" in " ".join(p.info["cmdline"] or [])
            and port in (p.info["cmdline"] or [])]
    assert not left, "the bench left its llama-server running"

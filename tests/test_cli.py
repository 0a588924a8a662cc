"""The command line as a user runs it: JSON contracts, exit codes, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SPECCHAT = [sys.executable, "-m", "app.cli"]


def specchat(*args: object, home: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECCHAT_HOME=str(home))
    env.pop("SPECCHAT_MODELS_DIR", None)
    return subprocess.run([*SPECCHAT, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def assert_clean_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("specchat: error:"), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_generate_json_contract(smol_path, tmp_path):
    result = specchat("generate", "-p", "List three colours.", "-m", smol_path, "--mode", "lookup", "-n", 12,
                      "--json", "-c", 512, home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("text", "prompt_tokens", "tokens", "mode", "stats"):
        assert key in data
    assert data["mode"] == "lookup"
    assert 0 < len(data["tokens"]) <= 12 and all(isinstance(t, int) for t in data["tokens"])
    assert len(data["prompt_tokens"]) > 5
    for key in ("tokens_per_second", "drafted", "accepted", "acceptance_rate", "mean_accepted_length"):
        assert key in data["stats"]
    assert data["stats"]["accepted"] <= data["stats"]["drafted"]


def test_bench_json_contract(smol_path, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "echo", "prompt": "Repeat exactly: alpha beta gamma delta alpha beta gamma delta"}\n')
    result = specchat("bench", "--prompts", prompts, "--json", "-m", smol_path, "--modes", "none,lookup",
                      "-n", 16, "-c", 512, home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    runs = data["runs"]
    assert [r["mode"] for r in runs] == ["none", "lookup"]
    for run in runs:
        for key in ("prompt_id", "mode", "tokens", "tokens_per_second", "speedup", "acceptance_rate", "identical"):
            assert key in run
        assert run["prompt_id"] == "echo"
    assert runs[0]["speedup"] == pytest.approx(1.0)
    assert runs[1]["identical"] or runs[1]["divergence"]["margin"] < 0.1
    assert "machine" in data and "settings" in data


def test_missing_model_file(tmp_path):
    assert_clean_error(specchat("generate", "-p", "hi", "-m", tmp_path / "nope.gguf", home=tmp_path), "nope.gguf",
                       "does not exist")


def test_not_a_gguf(tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("this is a text file, not a model\n" * 100)
    assert_clean_error(specchat("generate", "-p", "hi", "-m", bogus, "--mode", "none", home=tmp_path), "notes.gguf")


def test_truncated_gguf(smol_path, tmp_path):
    cut = tmp_path / "cut.gguf"
    with open(smol_path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(8 << 20))
    assert_clean_error(specchat("generate", "-p", "hi", "-m", cut, "--mode", "none", home=tmp_path), "cut.gguf")


def test_context_overflow(smol_path, tmp_path):
    long_prompt = "word " * 400
    result = specchat("generate", "-p", long_prompt, "-m", smol_path, "--mode", "none", "-c", 256, home=tmp_path)
    assert_clean_error(result, "context holds 256")


def test_incompatible_pair_names_the_token(target_path, smol_path, tmp_path):
    result = specchat("check-pair", target_path, smol_path, home=tmp_path)
    assert result.returncode == 2
    assert "vocab sizes 151,936 vs 49,152" in result.stdout + result.stderr
    ok = specchat("check-pair", target_path, target_path.with_name("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
                  home=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # Generation refuses the pair before loading weights, and never falls back to plain decoding.
    gen = specchat("generate", "-p", "hi", "-m", target_path, "-md", smol_path, home=tmp_path)
    assert_clean_error(gen, "cannot speculate", "token")


def test_draft_mode_without_a_draft_is_refused(smol_path, tmp_path):
    assert_clean_error(specchat("generate", "-p", "hi", "-m", smol_path, "--mode", "draft", home=tmp_path),
                       "needs a draft model")


def test_negative_copy_max_is_refused(smol_path, tmp_path):
    assert_clean_error(specchat("generate", "-p", "hi", "-m", smol_path, "--copy-max", -1, home=tmp_path),
                       "--copy-max -1")
    assert_clean_error(specchat("generate", "-p", "hi", "-m", smol_path, "--copy-max", "lots", home=tmp_path),
                       "--copy-max lots: give auto")


def test_copy_max_flag_takes_auto_a_k_or_the_setting():
    from app.cli.options import _copy_max
    from app.engine.spec_params import COPY_MAX_AUTO

    assert _copy_max("auto", 0) == COPY_MAX_AUTO and _copy_max("AUTO", 7) == COPY_MAX_AUTO
    assert _copy_max("15", COPY_MAX_AUTO) == 15 and _copy_max("0", COPY_MAX_AUTO) == 0
    assert _copy_max(None, 9) == 9 and _copy_max(None, COPY_MAX_AUTO) == COPY_MAX_AUTO


def test_steady_shapes_flag_reaches_the_engine_params():
    from app.cli.main import build_parser
    from app.cli.options import gen_params
    from app.settings import Settings

    parser = build_parser()
    for argv, expected in ((["bench", "--steady-shapes"], True), (["bench"], False),
                           (["generate", "-p", "hi", "--steady-shapes"], True)):
        args = parser.parse_args(argv)
        assert gen_params(args, Settings(), has_draft=False).spec.steady_shapes is expected, argv


def test_bad_prompts_file(smol_path, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "x"}\nnot json\n')
    assert_clean_error(specchat("bench", "--prompts", prompts, "-m", smol_path, home=tmp_path), "line 2")


def test_no_models_configured_points_to_fetch_demo(tmp_path):
    if shutil.which("true") is None:
        pytest.skip("needs a POSIX environment")
    assert_clean_error(specchat("generate", "-p", "hi", home=tmp_path), "specchat models fetch-demo")


def test_pair_that_will_not_fit_is_refused_before_loading(target_path, draft_path, tmp_path):
    # A million-token context needs ~28 GiB of KV cache for the target alone: more than this machine has.
    result = specchat("generate", "-p", "hi", "-m", target_path, "-md", draft_path, "-c", 1_000_000,
                      home=tmp_path, timeout=60)
    assert_clean_error(result, "predicted not to fit", "over by", "--force")


def test_threads_draft_flag_reaches_the_pair_config_and_the_draft_context(smol_path):
    """-td sets the draft context's CPU threads apart from the target's (llama.cpp's -td); without it both use -t."""
    from app.cli.main import build_parser
    from app.cli.native_bench import NativeSettings, command
    from app.cli.options import UserError, pair_config
    from app.engine.pair_config import PairConfig
    from app.engine.session import GenParams, SpecSession
    from app.settings import Settings

    parser = build_parser()
    for argv, expected in ((["generate", "-p", "hi", "-t", "2", "-td", "1"], 1), (["generate", "-p", "hi"], None),
                           (["bench", "-td", "0"], 0)):
        args = parser.parse_args(argv)
        assert pair_config(args, Settings(), smol_path, smol_path).n_threads_draft == expected, argv
    with pytest.raises(UserError, match="--threads-draft -1"):
        pair_config(parser.parse_args(["generate", "-p", "hi", "-td", "-1"]), Settings(), smol_path, smol_path)

    with SpecSession(PairConfig(smol_path, smol_path, n_ctx=512, n_threads=2, n_threads_draft=1)) as session:
        assert session.target_ctx.config.n_threads == 2 and session.draft_ctx.config.n_threads == 1
        finish = [e for e in session.generate(session.target_model.tokenize("Count: 1, 2, 3,"),
                                              GenParams(mode="draft", n_predict=8))][-1]
        assert finish.stats.n_tokens > 0 and finish.stats.drafted > 0  # the draft context ran, on its own threads
    with SpecSession(PairConfig(smol_path, smol_path, n_ctx=512, n_threads=2)) as session:
        assert session.draft_ctx.config.n_threads == 2

    # The bench passes it on to llama.cpp's draft-simple, so both engines' drafts get the same threads.
    base = dict(bin_dir=Path("bin"), target=Path("t.gguf"), draft=Path("d.gguf"), n_ctx=512, n_threads=2,
                n_batch=512, flash_attn=True, repack=True, n_gpu_layers=0, n_gpu_layers_draft=0, type_k="f16",
                type_v="f16", temp=0.0, top_k=1, top_p=1.0, min_p=0.0, seed=None, draft_max=6, p_min=0.75)
    with_td = command("draft-simple", NativeSettings(**base, n_threads_draft=1), Path("p.txt"), 8)
    assert with_td[with_td.index("-td") + 1] == "1"
    assert "-td" not in command("draft-simple", NativeSettings(**base), Path("p.txt"), 8)

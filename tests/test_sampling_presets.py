"""Sampling as users expect: the model's recommendation (GGUF keys, the catalogue, the chat default),
the presets in Settings, and the CLI flags that follow llama.cpp's names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from tiny_gguf import write_tiny

from app import settings as settings_mod
from app.engine.sampling import SamplingParams
from app.models.recommended_sampling import CHAT_DEFAULT, recommended_for
from app.settings import Settings

# --- the model's recommendation ------------------------------------------------------------------------------


def test_demo_target_gets_qwen_recommendation(target_path):
    rec = recommended_for(target_path)
    v = rec.values
    assert (v.temperature, v.top_k, v.top_p, v.repeat_penalty) == (0.7, 20, 0.8, 1.05)
    assert "Qwen2" in rec.source


@pytest.mark.parametrize("name,family", [
    ("DeepSeek-R1-Distill-Qwen-7B", "DeepSeek-R1"),  # a Qwen2 architecture, but DeepSeek's recommendation
    ("Qwen3-8B", "Qwen3"),
    ("Meta-Llama-3.1-8B-Instruct", "Llama 3"),
    ("gemma-3-1b-it", "Gemma"),
    ("SmolLM2 135M", "SmolLM2"),
])
def test_catalogue_matches_the_family(tmp_path, name, family):
    rec = recommended_for(write_tiny(tmp_path / "m.gguf", extra={"general.name": name}))
    assert family in rec.source and rec.values != CHAT_DEFAULT


def test_unknown_model_and_unreadable_file_get_the_chat_default(tmp_path):
    assert recommended_for(write_tiny(tmp_path / "m.gguf")).values == CHAT_DEFAULT
    broken = tmp_path / "broken.gguf"
    broken.write_text("not a model")
    assert recommended_for(broken).values == CHAT_DEFAULT
    assert CHAT_DEFAULT.temperature > 0 and CHAT_DEFAULT.repeat_penalty > 1.0


def test_gguf_sampling_keys_override_the_catalogue(tmp_path):
    f32, i32 = gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.INT32
    path = write_tiny(tmp_path / "m.gguf", extra={
        "general.name": "Qwen2.5 7B Instruct",
        "general.sampling.temp": (0.3, f32),
        "general.sampling.penalty_repeat": (1.2, f32),
        "general.sampling.penalty_last_n": (128, i32),
        "general.sampling.top_p": (0.0, f32),  # not a valid top-p: ignored, the catalogue's stays
        "general.sampling.min_p": "0.1",  # wrong type: ignored
    })
    rec = recommended_for(path)
    v = rec.values
    assert v.temperature == pytest.approx(0.3) and v.repeat_penalty == pytest.approx(1.2)
    assert v.repeat_last_n == 128 and v.top_k == 20 and v.top_p == 0.8 and v.min_p == CHAT_DEFAULT.min_p
    assert "general.sampling" in rec.source and "Qwen2" in rec.source


# --- presets in Settings --------------------------------------------------------------------------------------


def test_presets_resolve_to_sampling_params(target_path):
    qwen = recommended_for(target_path).values
    s = Settings(seed=5)
    rec = s.sampling_params(qwen)
    assert (rec.temperature, rec.top_k, rec.repeat_penalty, rec.seed) == (0.7, 20, 1.05, 5)
    assert not rec.greedy and rec.penalized
    assert s.sampling_params() == SamplingParams(seed=5, **CHAT_DEFAULT.as_dict())  # no recommendation known
    greedy = s.sampling_params(qwen, preset="greedy")
    assert greedy == SamplingParams(seed=5) and greedy.greedy and not greedy.penalized
    custom = Settings(sampling="custom", temperature=0.3, presence_penalty=0.4).sampling_params(qwen)
    assert (custom.temperature, custom.presence_penalty, custom.top_k) == (0.3, 0.4, CHAT_DEFAULT.top_k)
    params = Settings(sampling="greedy").gen_params("lookup", qwen)
    assert params.mode == "lookup" and params.sampling.greedy


def test_old_settings_files_migrate(tmp_path):
    # Written before presets: the old defaults (greedy) were no choice, so the recommendation takes over.
    old_defaults = {"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "theme": "dark"}
    s = settings_mod.from_dict(old_defaults)
    assert s.sampling == "recommended" and s.theme == "dark" and s.temperature == CHAT_DEFAULT.temperature
    # A temperature the user chose is kept, as it was: custom, without the penalties that did not exist.
    s = settings_mod.from_dict({**old_defaults, "temperature": 0.7})
    assert s.sampling == "custom" and s.temperature == 0.7 and s.repeat_penalty == 1.0
    assert settings_mod.from_dict({"sampling": "from-a-newer-version"}).sampling == "recommended"
    path = tmp_path / "settings.json"
    settings_mod.save(Settings(sampling="custom", repeat_penalty=1.2, repeat_last_n=256), path)
    loaded, warning = settings_mod.load(path)
    assert warning is None and loaded.sampling == "custom"
    assert (loaded.repeat_penalty, loaded.repeat_last_n) == (1.2, 256)
    assert json.loads(path.read_text())["sampling"] == "custom"


# --- the command line -----------------------------------------------------------------------------------------


def _specchat(*args: object, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECCHAT_HOME=str(home))
    env.pop("SPECCHAT_MODELS_DIR", None)
    return subprocess.run([sys.executable, "-m", "app.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def _generate(smol_path: Path, home: Path, *flags: object) -> dict:
    result = _specchat("generate", "-p", "Say the word cat five times, separated by spaces.", "-m", smol_path,
                       "--mode", "lookup", "-n", 16, "-c", 512, "--json", *flags, home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_generate_samples_as_the_model_recommends(smol_path, tmp_path):
    data = _generate(smol_path, tmp_path)
    s = data["sampling"]
    assert s["preset"] == "recommended" and "SmolLM2" in s["recommended_by"]
    assert s["temperature"] == 0.2 and s["top_p"] == 0.9  # SmolLM2-Instruct's model card


def test_generate_flags_follow_llama_cpp_names(smol_path, tmp_path):
    plain = _generate(smol_path, tmp_path, "--sampling", "greedy")
    assert plain["sampling"]["temperature"] == 0.0 and plain["sampling"]["repeat_penalty"] == 1.0
    flags = ("--sampling", "greedy", "--repeat-penalty", 1.5, "--repeat-last-n", 32, "--frequency-penalty", 0.5,
             "--presence-penalty", 0.5)
    first, second = _generate(smol_path, tmp_path, *flags), _generate(smol_path, tmp_path, *flags)
    s = first["sampling"]
    assert (s["repeat_penalty"], s["repeat_last_n"], s["frequency_penalty"], s["presence_penalty"]) == \
        (1.5, 32, 0.5, 0.5)
    assert first["tokens"] == second["tokens"]  # greedy with penalties is still deterministic
    assert first["tokens"] != plain["tokens"]  # and the penalties reached the engine


@pytest.mark.parametrize("flag,value", [("--repeat-penalty", 0), ("--repeat-last-n", -1), ("--top-p", 0)])
def test_bad_sampling_flags_are_refused_before_loading(smol_path, tmp_path, flag, value):
    result = _specchat("generate", "-p", "hi", "-m", smol_path, flag, value, home=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("specchat: error:"), result.stderr
    assert "Traceback" not in result.stderr and "load" not in result.stderr.lower()


def test_bench_stays_greedy(smol_path, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "echo", "prompt": "Repeat exactly: alpha beta gamma"}\n')
    result = _specchat("bench", "--prompts", prompts, "--json", "-m", smol_path, "--modes", "none", "-n", 8,
                       "-c", 512, "--repeat", 1, "--no-warmup", home=tmp_path)
    assert result.returncode == 0, result.stderr
    sampling = json.loads(result.stdout)["settings"]["sampling"]
    assert sampling["temperature"] == 0.0 and sampling["repeat_penalty"] == 1.0


def test_old_settings_files_get_long_copies_on_auto(tmp_path):
    # Before version 2 every file held copy_max 0, the old default: it becomes "auto" (-1); a K stays.
    assert settings_mod.from_dict({"copy_max": 0, "theme": "dark"}).copy_max == -1
    assert settings_mod.from_dict({"copy_max": 15}).copy_max == 15
    path = tmp_path / "settings.json"
    settings_mod.save(Settings(copy_max=0), path)  # a choice made since: off stays off
    loaded, warning = settings_mod.load(path)
    assert warning is None and loaded.copy_max == 0 and loaded.settings_version == settings_mod.SETTINGS_VERSION
    assert json.loads(path.read_text())["settings_version"] == settings_mod.SETTINGS_VERSION

"""Which runs a prompt starts (ui.shell.run_policy), without a window: the chosen mode with "auto" resolved for the
loaded pair and the build, the compare switch, the chat's own sampling and the model names stored with a reply."""

from __future__ import annotations

from pathlib import Path

from app.engine.pair_config import PairConfig
from app.settings import Settings
from ui.shell.run_policy import RunPolicy

TARGET, DRAFT = Path("/models/target-q4.gguf"), Path("/models/draft-q8.gguf")  # unread: chat default sampling


def test_one_chat_run_in_the_chosen_mode_with_the_settings_sampling() -> None:
    runs = RunPolicy(Settings(n_predict=7, sampling="custom", temperature=0.3), "lookup").runs()
    assert [name for name, _ in runs] == ["chat"]
    params = runs[0][1]
    assert params.mode == "lookup" and params.n_predict == 7 and params.sampling.temperature == 0.3
    assert not params.track_margins


def test_the_chats_own_preset_wins_over_the_settings() -> None:
    policy = RunPolicy(Settings(sampling="custom", temperature=0.3), "lookup", chat_preset="greedy")
    assert policy.runs()[0][1].sampling.greedy


def test_auto_is_resolved_for_the_pair_and_the_build() -> None:
    with_draft, alone = PairConfig(TARGET, DRAFT), PairConfig(TARGET)
    assert RunPolicy(Settings(), "auto", config=with_draft, gpu_offload=True).mode() == "hybrid"
    assert RunPolicy(Settings(), "auto", config=with_draft, gpu_offload=False).mode() == "lookup"
    assert RunPolicy(Settings(), "auto", config=alone, gpu_offload=True).mode() == "lookup"
    mtp = RunPolicy(Settings(), "auto", config=alone, modes=("lookup", "mtp", "none"), gpu_offload=True)
    assert mtp.mode() == "mtp" and mtp.runs()[0][1].mode == "mtp"
    assert RunPolicy(Settings(), "auto").mode() == "lookup"  # nothing loaded, no GPU
    assert RunPolicy(Settings(), "draft", config=alone, gpu_offload=True).mode() == "draft"  # a choice stays


def test_a_comparison_runs_plain_then_speculative_both_greedy() -> None:
    policy = RunPolicy(Settings(sampling="custom", temperature=0.9), "draft", compare=True,
                       config=PairConfig(TARGET, DRAFT))
    (plain_name, plain), (spec_name, spec) = policy.runs()
    assert (plain_name, spec_name) == ("plain", "spec")
    assert plain.mode == "none" and plain.track_margins and plain.sampling.greedy
    assert spec.mode == "draft" and not spec.track_margins and spec.sampling.greedy
    # Continuing a reply extends the chat's answer only: one run, the speculative side's parameters.
    assert policy.chat_run() == [("chat", spec)]


def test_comparing_plain_decoding_with_itself_speculates_on_the_right() -> None:
    runs = RunPolicy(Settings(), "none", compare=True, config=PairConfig(TARGET, DRAFT), gpu_offload=True).runs()
    assert [params.mode for _, params in runs] == ["none", "hybrid"]


def test_model_names_stored_with_a_reply() -> None:
    assert RunPolicy(Settings(), "draft").model_names() == {}  # nothing loaded
    pair = PairConfig(TARGET, DRAFT)
    assert RunPolicy(Settings(), "draft", config=pair).model_names() == {"target": "target-q4", "draft": "draft-q8"}
    # The draft model is named only where it drafted.
    assert RunPolicy(Settings(), "lookup", config=pair).model_names() == {"target": "target-q4", "draft": None}

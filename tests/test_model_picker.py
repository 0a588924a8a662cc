"""The model picker (pytest-qt, offscreen) on the real Qwen pair and SmolLM2 in a temporary models folder.

A fake one-GPU build is injected so the GPU-layer sliders move memory between devices; the
recommended-pair download runs on a qasync loop against the local Hub of tests/hub_server.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from hub_server import FakeHub  # noqa: E402
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402

from app.engine.memory_plan import ENGINE_OUTPUTS_MAX, model_settings  # noqa: E402
from app.engine.pair_config import PairConfig  # noqa: E402
from app.memory import BuildSpec, DeviceBudget, GiB, GpuSpec, predict_pair  # noqa: E402
from app.models.catalog import CatalogModel, CatalogPair  # noqa: E402
from app.models.gguf_meta import read_gguf  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.gui_support import models_folder  # noqa: E402
from ui.picker.model_list import LOOKUP  # noqa: E402
from ui.picker.model_picker import ModelPickerDialog, PickerChoice  # noqa: E402

GPU_BUILD = BuildSpec(gpus=(GpuSpec("CUDA0", 8 * GiB),), runtime="cuda")
GPU_BUDGETS = [DeviceBudget("CUDA0", "gpu", 7 * GiB, 8 * GiB, "test GPU"),
               DeviceBudget("CPU", "ram", 24 * GiB, 32 * GiB, "system RAM")]  # fmt: skip


@pytest.fixture
def folder(tmp_path: Path, target_path: Path, draft_path: Path, smol_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Path:  # fmt: skip
    return models_folder(tmp_path, monkeypatch, target_path, draft_path, smol_path)


def make_dialog(qtbot, folder: Path, **kwargs: object) -> ModelPickerDialog:  # type: ignore[no-untyped-def]
    """The dialog once its listing (and the preselected target's pair checks) are in."""
    dialog = ModelPickerDialog(Settings(), None, folders=[folder], build=GPU_BUILD, device_budgets=GPU_BUDGETS,
                               **kwargs)  # type: ignore[arg-type]  # fmt: skip
    qtbot.addWidget(dialog)
    settle(qtbot, dialog)
    return dialog


def settle(qtbot, dialog: ModelPickerDialog) -> None:  # type: ignore[no-untyped-def]
    """Wait until the dialog's background work (listing, pair checks, the meter's update) is in."""
    qtbot.waitUntil(lambda: not dialog.busy(), timeout=30000)


def choose_target(qtbot, dialog: ModelPickerDialog, path: Path) -> bool:  # type: ignore[no-untyped-def]
    """Select the target as a click does, and wait for its drafts to be checked."""
    selected = dialog.targets.select(path)
    settle(qtbot, dialog)
    return selected


def test_lists_local_models_with_their_metadata(qtbot, folder: Path) -> None:  # type: ignore[no-untyped-def]
    dialog = make_dialog(qtbot, folder)
    rows = {r[0]: r for r in dialog.targets.row_texts()}
    qwen, draft, smol = (rows["qwen2.5-coder-1.5b-instruct-q4_k_m"], rows["qwen2.5-coder-0.5b-instruct-q4_k_m"],
                         rows["SmolLM2-135M-Instruct.Q4_1"])  # fmt: skip
    assert qwen[1:6] == ["qwen2", "1.78B", "Q4_K_M", "32,768", "1.12 GB"]
    assert smol[1:4] == ["llama", "135M", "Q4_1"]
    assert qwen[6] == draft[6] != smol[6]  # tokenizer fingerprints: the Qwen pair shares one


def test_picking_the_target_sorts_drafts_and_greys_the_mismatch(qtbot, folder: Path, target_path: Path,
                                                                draft_path: Path, smol_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    dialog = make_dialog(qtbot, folder)
    assert dialog.targets.select(folder / target_path.name)
    assert dialog.drafts.row_texts()[1][-1] == "checking…"  # the pair checks run off the GUI thread
    settle(qtbot, dialog)
    rows = dialog.drafts.row_texts()
    assert rows[0][0] == "Prompt lookup (no draft model)"
    assert rows[1][0] == draft_path.stem and "1/2.8" in rows[1][-1]
    assert rows[-1][0] == smol_path.stem
    assert rows[-1][-1] == "incompatible: vocab sizes 151,936 vs 49,152 (at most 128 apart allowed)"
    assert dialog.drafts.is_greyed(folder / smol_path.name)
    assert not dialog.drafts.select(folder / smol_path.name)  # listed, but cannot be chosen
    assert dialog.drafts.select(folder / draft_path.name)
    assert "Warning:" in dialog.findings.text() and "3x smaller" in dialog.findings.text()
    choice = dialog.current_choice()
    assert choice is not None and (choice.mode, choice.draft) == ("draft", folder / draft_path.name)


def test_meter_follows_the_gpu_layer_slider(qtbot, folder: Path, target_path: Path, draft_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    dialog = make_dialog(qtbot, folder, target=folder / target_path.name, draft=folder / draft_path.name)
    meter, settings = dialog.pair_settings.meter, dialog.pair_settings
    full = meter.used_bytes()
    assert settings.values()[0] == -1 and full > GiB  # all layers of both models on the GPU
    settings.ngl.setValue(0)
    assert meter.used_bytes() < full - GiB // 2  # the target's weights left the GPU
    assert settings.ngl_label.text() == "0 of 28"
    settings.ngld.setValue(10)
    assert dialog.current_choice() == PickerChoice(folder / target_path.name, folder / draft_path.name, "draft",
                                                   0, 10, 4096)  # fmt: skip


def test_meter_predicts_what_the_session_will_load(qtbot, folder: Path, target_path: Path, draft_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The picker's numbers are the session's: the same context settings as SpecSession's own check (its
    compute buffers sized for the engine's logits rows, not llama.cpp's n_batch: 495 MiB apart on this pair)."""
    dialog = make_dialog(qtbot, folder, target=folder / target_path.name, draft=folder / draft_path.name)
    settings = dialog.pair_settings
    settings.set_values(10, -1, 8192)
    cfg = PairConfig(folder / target_path.name, folder / draft_path.name, n_gpu_layers=10, n_ctx=8192)
    target, draft = read_gguf(cfg.target), read_gguf(cfg.draft)
    session = predict_pair(target, draft, model_settings(cfg, "target"), model_settings(cfg, "draft"), GPU_BUILD,
                           GPU_BUDGETS)
    assert settings.prediction is not None
    assert [m.buffers for m in settings.prediction.models] == [m.buffers for m in session.models]
    # The target's logits grow to the longest verify the engine may ask for, a long copy's.
    output = next(b for b in session.models[0].buffers if b.kind == "output")
    assert output.bytes == ENGINE_OUTPUTS_MAX * target.vocab_size * 4


def test_prompt_lookup_is_a_choice_and_ok_emits_it(qtbot, folder: Path, smol_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    dialog = make_dialog(qtbot, folder)
    choose_target(qtbot, dialog, folder / smol_path.name)
    assert dialog.drafts.select(LOOKUP)
    pairs: list[tuple[object, object]] = []
    dialog.pairChosen.connect(lambda target, draft: pairs.append((target, draft)))
    with qtbot.waitSignal(dialog.choiceMade, timeout=2000) as signal:
        dialog.accept()
    choice = signal.args[0]
    assert pairs == [(folder / smol_path.name, None)]
    assert (choice.target, choice.draft, choice.mode) == (folder / smol_path.name, None, "lookup")
    assert choice.apply(Settings()).mode == "lookup" and dialog.choice() == choice


def test_dropping_a_non_gguf_file_names_the_problem(qtbot, folder: Path, tmp_path: Path, smol_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    dialog = make_dialog(qtbot, folder)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(smol_path.read_bytes()[: 4 << 20])
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(notes)), QUrl.fromLocalFile(str(truncated))])
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)  # fmt: skip
    dialog.dropEvent(event)
    settle(qtbot, dialog)
    errors = dialog.errors.text()
    assert f"{notes}: not a GGUF file" in errors
    assert f"{truncated}: truncated file" in errors
    assert len(dialog.targets.row_texts()) == 3  # the good models are still listed


def test_a_failing_job_becomes_the_error_text(qtbot, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    from ui.picker import model_picker

    def broken(*_args: object) -> None:
        raise OSError("the disk went away")

    monkeypatch.setattr(model_picker, "scan", broken)
    dialog = make_dialog(qtbot, folder)  # no exception reaches the GUI thread
    assert dialog.errors.text() == "Could not list the models: OSError: the disk went away"
    assert dialog.targets.row_texts() == [] and "Scanning" not in dialog.status.text()


def test_a_dialog_closed_while_its_jobs_run_is_left_alone(qtbot, folder: Path) -> None:  # type: ignore[no-untyped-def]
    """Its jobs (the device query here too) finish after the dialog is gone, and their results go nowhere."""
    import threading

    from PySide6.QtCore import QCoreApplication, QEvent

    dialog = ModelPickerDialog(Settings(), None, folders=[folder])
    dialog.show()
    assert dialog.busy() and "Scanning models…" in dialog.status.text()
    dialog.close()
    dialog.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    qtbot.waitUntil(lambda: not any(t.name.startswith("picker-") for t in threading.enumerate()), timeout=30000)
    qtbot.wait(50)  # the jobs' queued results are delivered (to no one)
    assert len(make_dialog(qtbot, folder).targets.row_texts()) == 3  # and the next dialog works


# --- recommended pairs ---------------------------------------------------------------------------------


@pytest.fixture
def qloop(qapp) -> Iterator[asyncio.AbstractEventLoop]:  # type: ignore[no-untyped-def]
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def fake_hub(smol_path: Path) -> Iterator[FakeHub]:
    fh = FakeHub()
    fh.add_repo("test/smol-GGUF", {smol_path.name: smol_path})
    fh.add_repo("test/smol-copy-GGUF", {smol_path.name: smol_path})  # a valid draft for it: itself
    fh.start()
    yield fh
    fh.stop()


def served_pair(smol_path: Path) -> CatalogPair:
    target = CatalogModel("target", "test/smol-GGUF", smol_path.name, 98 << 20, "135M", "Q4_1")
    draft = CatalogModel("draft", "test/smol-copy-GGUF", smol_path.name, 98 << 20, "135M", "Q4_1")
    return CatalogPair("test-pair", "Test pair", target, draft, "")


def test_pair_download_and_cancel_run_without_blocking(qtbot, qloop, folder: Path, fake_hub: FakeHub,  # type: ignore[no-untyped-def]
                                                       smol_path: Path, tmp_path: Path) -> None:  # fmt: skip
    dialog = make_dialog(qtbot, folder, pairs=[served_pair(smol_path)], hub_endpoint=fake_hub.url,
                         cache_dir=tmp_path / "hub-cache")  # fmt: skip
    tab = dialog.recommended
    tab.select("test-pair")
    assert tab.destination() == "cache"
    fake_hub.chunk_delay = 0.01  # ~100 MB/s: slow enough to press Cancel midway

    async def cancel_midway() -> None:
        assert tab.start_download("test-pair")
        while tab.panel.bar_value("target") < 0.2:  # the GUI keeps running while bytes arrive
            await asyncio.sleep(0.01)
        tab.panel.cancel_button.click()
        assert tab._task is not None and await tab._task is None

    qloop.run_until_complete(asyncio.wait_for(cancel_midway(), 30))
    assert "Cancelled" in tab.panel.title.text() and "kept" in tab.panel.title.text()
    fake_hub.chunk_delay = 0.0
    with qtbot.waitSignal(tab.pairReady, timeout=30000):
        got = qloop.run_until_complete(tab.download("test-pair"))
    assert got is not None and got.target.is_relative_to(tmp_path / "hub-cache")
    assert fake_hub.requests("cdn", "GET")[-2].range is not None  # the target resumed
    assert tab.table.topLevelItem(0).text(4) == "downloaded"
    qtbot.waitUntil(lambda: tab.panel.bar_value("target") == 1.0, timeout=5000)
    settle(qtbot, dialog)
    assert dialog.targets.current() == got.target and dialog.drafts.current() == got.draft


def test_open_picker_and_its_picture(qtbot, folder: Path, target_path: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    from PySide6.QtGui import QImage

    from ui.picker.model_picker import grab_picker, open_picker

    settings = Settings(target_path=str(folder / target_path.name), mode="lookup", n_ctx=8192)
    dialog = open_picker(None, settings, folders=[folder], build=GPU_BUILD, device_budgets=GPU_BUDGETS)
    qtbot.addWidget(dialog)
    settle(qtbot, dialog)
    assert dialog.isVisible() and dialog.current_choice() == PickerChoice(folder / target_path.name, None, "lookup",
                                                                          -1, -1, 8192)  # fmt: skip
    picture = grab_picker(tmp_path / "picker.png", settings, folders=[folder], build=GPU_BUILD,
                          device_budgets=GPU_BUDGETS)  # fmt: skip
    image = QImage(str(picture))
    assert image.width() >= 1000 and image.height() >= 600
    colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 23)}
    assert len(colours) > 20  # text, lists and the meter, not a blank window


def test_hub_search_lists_repos_and_files_and_downloads_one(qtbot, qloop, folder: Path, fake_hub: FakeHub,  # type: ignore[no-untyped-def]
                                                            smol_path: Path, tmp_path: Path) -> None:  # fmt: skip
    dialog = make_dialog(qtbot, folder, hub_endpoint=fake_hub.url, cache_dir=tmp_path / "hub-cache")
    tab = dialog.hub_search
    qloop.run_until_complete(tab.search("smol"))
    repos = [tab.repos.topLevelItem(i).text(0) for i in range(tab.repos.topLevelItemCount())]
    assert sorted(repos) == ["test/smol-GGUF", "test/smol-copy-GGUF"]
    qloop.run_until_complete(tab.list_files("test/smol-GGUF"))
    assert tab.files.topLevelItem(0).text(0) == smol_path.name and tab.files.topLevelItem(0).text(1) == "0.10 GB"
    path = qloop.run_until_complete(tab.download("test/smol-GGUF", smol_path.name))
    assert path is not None and path.is_relative_to(tmp_path / "hub-cache")
    settle(qtbot, dialog)
    assert str(path) in {str(r) for r in dialog._entries}  # listed in the local tab once scanned
    qloop.run_until_complete(tab.list_files("test/nope"))
    assert "repository test/nope not found" in tab.error.text()

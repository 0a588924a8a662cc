"""The memory meter widget: proportional segments, the colour state at its thresholds, the picture."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from app.memory import BuildSpec, DeviceBudget, GiB, GpuSpec, ModelSettings, predict_pair  # noqa: E402
from app.models.gguf_meta import read_gguf  # noqa: E402
from ui.stats.memory_meter import SEGMENT_COLOURS, STATE_COLOURS, MemoryMeter, meter_state  # noqa: E402

VALUES = {
    "target_weights": 4 * GiB,
    "draft_weights": 1 * GiB,
    "target_kv": 2 * GiB,
    "draft_kv": GiB // 2,
    "compute": GiB // 2,
    "overhead": 0,
}


@pytest.fixture
def meter(qtbot) -> MemoryMeter:
    w = MemoryMeter()
    qtbot.addWidget(w)
    w.resize(408, w.height())  # a 400 px bar
    return w


def test_segments_are_proportional(meter: MemoryMeter) -> None:
    meter.set_usage(VALUES, budget_bytes=16 * GiB)
    rects = {r.key: r for r in meter.segment_rects()}
    assert "overhead" not in rects  # empty segments take no room
    for key, value in VALUES.items():
        if value:
            assert rects[key].width == pytest.approx(400 * value / (16 * GiB))
    assert rects["free"].width == pytest.approx(400 * 8 / 16)
    xs = [r.x for r in meter.segment_rects()]
    assert xs == sorted(xs) and xs[0] == pytest.approx(4)
    assert sum(r.width for r in meter.segment_rects()) == pytest.approx(400)


def test_over_budget_scales_to_the_use(meter: MemoryMeter) -> None:
    meter.set_usage(VALUES, budget_bytes=4 * GiB)
    rects = meter.segment_rects()
    assert "free" not in {r.key for r in rects}
    assert sum(r.width for r in rects) == pytest.approx(400)
    assert meter.state() == "over" and "over budget" in meter.summary()


@pytest.mark.parametrize(
    "used, state",
    [
        (9 * GiB - 1, "ok"),
        (9 * GiB, "ok"),
        (9 * GiB + 1, "tight"),
        (10 * GiB, "tight"),
        (10 * GiB + 1, "over"),
    ],
)
def test_colour_state_at_the_thresholds(meter: MemoryMeter, qtbot, used: int, state: str) -> None:
    assert meter_state(used, 10 * GiB, GiB) == state
    meter.set_usage({"target_weights": 1}, budget_bytes=10 * GiB)  # start from "ok"
    meter.set_usage({"target_weights": used}, budget_bytes=10 * GiB, margin_bytes=GiB)
    assert meter.state() == state


def test_state_change_is_signalled(meter: MemoryMeter, qtbot) -> None:
    meter.set_usage({"target_weights": GiB}, budget_bytes=10 * GiB)
    with qtbot.waitSignal(meter.stateChanged, timeout=1000) as blocker:
        meter.set_usage({"target_weights": 11 * GiB}, budget_bytes=10 * GiB)
    assert blocker.args == ["over"]


def test_picture_shows_segment_and_state_colours(meter: MemoryMeter) -> None:
    meter.set_usage(VALUES, budget_bytes=16 * GiB)
    meter.show()
    image = meter.grab().toImage()
    for r in meter.segment_rects():
        if r.key != "free" and r.width > 6:
            pixel = QColor(image.pixel(int(r.x + r.width / 2), 15))
            assert pixel.name() == SEGMENT_COLOURS[r.key].lower(), r.key
    border = QColor(image.pixel(int(meter.segment_rects()[0].x + 50), 3))
    assert border.name() == STATE_COLOURS["ok"].lower()


def test_compact_and_full_modes(qtbot) -> None:
    full, compact = MemoryMeter(), MemoryMeter(compact=True)
    for w in (full, compact):
        qtbot.addWidget(w)
        w.set_usage(VALUES, budget_bytes=16 * GiB)
    assert compact.height() < full.height()
    compact.set_compact(False)
    assert compact.height() == full.height()


def test_measured_values_beside_predicted(meter: MemoryMeter) -> None:
    meter.set_usage(VALUES, budget_bytes=16 * GiB)
    meter.set_measured({k: v // 2 for k, v in VALUES.items()})
    assert "measured 4.00 GiB" in meter.summary()
    rect = next(r for r in meter.segment_rects() if r.key == "target_weights")
    tip = meter._tooltip_at(__import__("PySide6.QtCore", fromlist=["QPoint"]).QPoint(int(rect.x + 5), 15))
    assert tip == "Target weights: 4.00 GiB  (measured 2.00 GiB)"
    meter.set_measured(None)
    assert "measured" not in meter.summary()


def test_unmeasured_overhead_says_so_and_nvml_overhead_is_shown(meter: MemoryMeter) -> None:
    from PySide6.QtCore import QPoint

    meter.set_usage({**VALUES, "overhead": GiB // 2}, budget_bytes=16 * GiB)
    measured = {k: v for k, v in VALUES.items() if k != "overhead"}
    meter.set_measured(measured)
    rect = next(r for r in meter.segment_rects() if r.key == "overhead")
    tip = meter._tooltip_at(QPoint(int(rect.x + rect.width / 2), 15))
    assert tip.endswith("(not measured: llama.cpp does not report it)"), tip
    meter.set_measured({**measured, "overhead": GiB // 4})
    tip = meter._tooltip_at(QPoint(int(rect.x + rect.width / 2), 15))
    assert tip.endswith("(measured 0.25 GiB by NVML)"), tip
    with pytest.raises(ValueError, match="unknown meter segments"):
        meter.set_measured({"kv": 1})


def test_unknown_segment_is_refused(meter: MemoryMeter) -> None:
    with pytest.raises(ValueError, match="unknown meter segments"):
        meter.set_usage({"weights": 1}, budget_bytes=GiB)


def test_from_a_pair_prediction(meter: MemoryMeter, target_path: Path, draft_path: Path) -> None:
    t, d = read_gguf(target_path), read_gguf(draft_path)
    gpu = BuildSpec(gpus=(GpuSpec("CUDA0", 8 * GiB),), runtime="cuda")
    budgets = [
        DeviceBudget("CUDA0", "gpu", 8 * GiB, 8 * GiB, "GPU"),
        DeviceBudget("CPU", "ram", 16 * GiB, 32 * GiB, "RAM"),
    ]
    pair = predict_pair(t, d, ModelSettings(n_ctx=8192, n_gpu_layers=-1), None, gpu, budgets)
    meter.set_prediction(pair)
    assert meter.used_bytes() == pair.use("CUDA0").predicted_bytes
    assert meter.summary().startswith("CUDA0:")
    meter.set_prediction(pair, "CPU")
    assert meter.used_bytes() == pair.use("CPU").predicted_bytes and meter.summary().startswith("system RAM")


def test_compact_line_fits_the_side_panel(qtbot) -> None:
    from PySide6.QtGui import QFontMetrics

    w = MemoryMeter(compact=True)
    qtbot.addWidget(w)
    w.resize(280, w.height())  # the side panel's width
    w.set_usage(VALUES, budget_bytes=16 * GiB, device_label="Vulkan0")
    before = w.height()
    w.set_measured({k: v for k, v in VALUES.items() if k != "overhead"})
    # Painted on two lines, each within the bar below the side panel's narrowest (300 px less its margins and
    # scroll bar), even for the CPU's longer device label; the meter grows by one line for the measured figure.
    assert w.compact_lines() == ["Vulkan0 8.00/16.00 GiB, fits", "measured 8.00 GiB"]
    assert w.height() == before + QFontMetrics(w.font()).height()
    w.set_usage(VALUES, budget_bytes=23 * GiB, device_label="system RAM")
    w.resize(220, w.height())
    for line in w.compact_lines():
        assert QFontMetrics(w.font()).horizontalAdvance(line) <= w.width() - 8, f"{line!r} would be cut"
    assert "measured 8.00 GiB" in w.summary()  # the tooltip keeps the long form

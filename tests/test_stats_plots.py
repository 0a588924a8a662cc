"""The statistics panel's painted plots, offscreen and without a model."""

from __future__ import annotations

from typing import Any

import pytest

from ui.stats.bar_plot import BarPlot, labelled

pytestmark = pytest.mark.gui


def test_bar_numbers_thin_out_instead_of_overlapping() -> None:
    # Few bars: every one is numbered.
    assert labelled(6, 1, slot=36.0, widest=12.0) == [0, 1, 2, 3, 4, 5]
    # 31 draft positions (copies run to K = 31) in a 220 px panel: 1, 5, 10, ... 30, never closer than a number.
    shown = labelled(31, 1, slot=216 / 31, widest=18.0)
    assert [i + 1 for i in shown] == [1, 5, 10, 15, 20, 25, 30]
    spacing = [(b - a) * 216 / 31 for a, b in zip(shown, shown[1:], strict=False)]
    assert min(spacing) >= 18.0
    # The histogram counts from 0: 0, 5, 10, ...
    assert labelled(32, 0, slot=216 / 32, widest=18.0)[:3] == [0, 5, 10]


def test_bar_plot_paints_a_long_row_of_positions(qtbot: Any) -> None:
    plot = BarPlot("Acceptance by draft position", "#4C9BE8", fraction=True, first_label=1)
    qtbot.addWidget(plot)
    plot.resize(220, 92)
    plot.set_values([0.9] * 31)
    image = plot.grab().toImage()
    assert image.width() == 220 and plot.values() == (0.9,) * 31
    assert "31: 90%" in plot.toolTip()  # every position is still in the tooltip



def test_the_histogram_shows_bins_up_to_the_longest_draft() -> None:
    from ui.stats.stats_panel import shown_histogram

    final = (2, 5, 1, 4) + (0,) * 28  # the engine's final tally, sized for a 31-token copy
    assert shown_histogram(final, 3) == (2, 5, 1, 4)
    assert shown_histogram(final, 5) == (2, 5, 1, 4, 0, 0)  # drafts of 5 that never all passed
    assert shown_histogram((0, 0, 0, 0, 0, 0, 1), 2) == (0, 0, 0, 0, 0, 0, 1)  # never hides a step
    assert shown_histogram((), 0) == ()

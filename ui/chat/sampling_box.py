"""The chat's own sampling preset, beside the prompt: the settings' default, or one for this chat.

Shows which preset the next reply uses (the default's name is in its label), so it is always
clear whether replies are greedy; each item's tooltip gives the values it stands for.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QWidget

from app.chat.conversations import CHAT_SAMPLING
from app.models.recommended_sampling import CHAT_DEFAULT, Recommendation, SamplingValues

# preset (None: the settings' default) -> the item's text; a chat's choice is stored as the key
LABELS: dict[str | None, str] = {
    None: "Default",
    "recommended": "Recommended",
    "greedy": "Greedy (deterministic)",
    "custom": "Custom",
}


def describe_values(v: SamplingValues) -> str:
    """Sampling values in a line, llama.cpp's names."""
    parts = [f"temperature {v.temperature:g}", f"top-k {v.top_k}" if v.top_k > 0 else "top-k off",
             f"top-p {v.top_p:g}", f"min-p {v.min_p:g}"]
    if v.repeat_penalty != 1.0:
        parts.append(f"repeat penalty {v.repeat_penalty:g}")
    if v.frequency_penalty:
        parts.append(f"frequency penalty {v.frequency_penalty:g}")
    if v.presence_penalty:
        parts.append(f"presence penalty {v.presence_penalty:g}")
    return ", ".join(parts)


def preset_details(recommended: Recommendation | None, custom: SamplingValues) -> dict[str, str]:
    """The values behind each preset (SamplingBox.set_details): the loaded target's recommendation (None while
    nothing is loaded) and the settings' custom values."""
    return {
        "recommended": (describe_values(recommended.values) + f" ({recommended.source})" if recommended
                        else describe_values(CHAT_DEFAULT) + " until a model with its own is loaded"),
        "greedy": "always the most likely token, no penalties: the same reply every time",
        "custom": describe_values(custom) + " (Settings)",
    }


class SamplingBox(QComboBox):
    presetChosen = Signal(object)  # str, or None for the settings' default

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Sampling preset")
        for preset, label in LABELS.items():
            self.addItem(label, preset)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self._default = "recommended"
        self._details: dict[str, str] = {}
        self._quiet = False
        self.currentIndexChanged.connect(self._on_self_currentIndexChanged)
        self._refresh()

    def preset(self) -> str | None:
        """This chat's choice (None: the default)."""
        data = self.currentData()
        return data if isinstance(data, str) else None

    def effective(self) -> str:
        """The preset the next reply uses."""
        return self.preset() or self._default

    def set_preset(self, preset: str | None) -> None:
        """Show a chat's choice (no signal: the chat already has it)."""
        self._quiet = True
        self.setCurrentIndex(max(0, self.findData(preset if preset in CHAT_SAMPLING else None)))
        self._quiet = False
        self._refresh()

    def set_default(self, preset: str) -> None:
        self._default = preset
        self._refresh()

    def set_details(self, details: dict[str, str]) -> None:
        """Per preset, the values it stands for now (the loaded model's recommendation, say)."""
        self._details = details
        self._refresh()

    def _refresh(self) -> None:
        self.setItemText(0, f"Default ({LABELS[self._default].split(' ')[0].lower()})")
        for i in range(self.count()):
            preset = self.itemData(i) or self._default
            what = self._details.get(preset, "")
            tip = "the settings' default, " if i == 0 else ""
            self.setItemData(i, f"{tip}{preset}{': ' + what if what else ''}", Qt.ItemDataRole.ToolTipRole)
        effective = self.effective()
        self.setToolTip(f"Sampling for this chat's replies: {effective}"
                        + (f" ({self._details[effective]})" if self._details.get(effective) else "")
                        + ". Default follows Settings → Sampling; greedy gives the same reply every time.")

    @Slot(int)
    def _on_self_currentIndexChanged(self, _index: int) -> None:
        self._refresh()
        if not self._quiet:
            self.presetChosen.emit(self.preset())

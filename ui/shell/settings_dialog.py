"""Settings (Ctrl+,): sampling, speculation, runtime and appearance, edited as one typed structure.

The dialog reads a `Settings` and returns a new one with only its own fields changed; the window
saves it (atomically, app.settings) and applies it: sampling and speculation to the next reply,
runtime fields to the next load of the models, the theme at once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.draft_policy import AUTO_COPY_MAX, COPY_MAX_AUTO
from app.settings import SAMPLING_FIELDS, SAMPLING_PRESETS, Settings

RUNTIME_FIELDS = ("n_ctx", "n_threads", "n_gpu_layers", "n_gpu_layers_draft", "flash_attn", "strict", "rpc")


def _int(low: int, high: int, special: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    if special:
        box.setSpecialValueText(special)  # shown at the minimum, e.g. "auto"
    return box


class _NamedSpinBox(QSpinBox):
    """A spin box that shows some values as words (Qt's special value text names only the minimum)."""

    def __init__(self, low: int, high: int, names: dict[int, str]) -> None:
        super().__init__()
        self._names = names
        self.setRange(low, high)

    def textFromValue(self, value: int) -> str:  # noqa: N802 (Qt's name)
        return self._names.get(value, str(value))

    def valueFromText(self, text: str) -> int:  # noqa: N802
        for value, name in self._names.items():
            if text.strip().lower() == name:
                return value
        return int(text) if text.strip().lstrip("-").isdigit() else self.value()

    def validate(self, text: str, pos: int) -> object:
        word = text.strip().lower()
        if any(name == word for name in self._names.values()):
            return QValidator.State.Acceptable
        if any(name.startswith(word) for name in self._names.values()) or not word:
            return QValidator.State.Intermediate
        return super().validate(text, pos)


def _float(low: float, high: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._settings = settings
        self._fields: dict[str, QWidget] = {
            "n_predict": _int(1, 65536),
            "sampling": QComboBox(),
            "temperature": _float(0.0, 2.0, 0.05),
            "top_k": _int(0, 1000, "off"),
            "top_p": _float(0.0, 1.0, 0.05),
            "min_p": _float(0.0, 1.0, 0.01),
            "seed": _int(-1, 2**31 - 1, "random"),
            "repeat_penalty": _float(0.5, 2.0, 0.01),
            "repeat_last_n": _int(0, 4096, "off"),
            "frequency_penalty": _float(0.0, 2.0, 0.05),
            "presence_penalty": _float(0.0, 2.0, 0.05),
            "draft_max": _int(1, 16),
            "draft_min": _int(0, 16),
            "draft_p_min": _float(0.0, 1.0, 0.05),
            "adaptive": QCheckBox("let the governor change K and stop drafting when it loses"),
            "copy_max": _NamedSpinBox(COPY_MAX_AUTO, AUTO_COPY_MAX, {COPY_MAX_AUTO: "auto", 0: "off"}),
            "n_ctx": _int(256, 262144),
            "n_threads": _int(0, 512, "auto"),
            "n_gpu_layers": _int(-1, 999, "all"),
            "n_gpu_layers_draft": _int(-1, 999, "all"),
            "flash_attn": QCheckBox("flash attention"),
            "strict": QCheckBox("strict exactness (bit-exact verifies, no CPU repacking: slower)"),
            "rpc": QLineEdit(),
            "theme": QComboBox(),
            "system_prompt": QPlainTextEdit(),
            "server_enabled": QCheckBox("serve an OpenAI-compatible API on the loaded pair"),
            "server_host": QLineEdit(),
            "server_port": _int(1, 65535),
            "server_api_key": QLineEdit(),
        }
        key = self._fields["server_api_key"]
        assert isinstance(key, QLineEdit)
        key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        key.setPlaceholderText("none (only 127.0.0.1 then)")
        key.setToolTip("Clients send it as 'Authorization: Bearer KEY'. Any address but loopback (127.0.0.1) needs "
                       "one.")
        self._fields["server_host"].setToolTip("127.0.0.1: this machine only. 0.0.0.0 or a LAN address: others "
                                               "too, which needs an API key")
        self._fields["server_enabled"].setToolTip(
            "Editors, agents and scripts reach the loaded models as OpenAI's API at http://HOST:PORT/v1, with "
            "speculation and Predicted Outputs; their requests show in the Local server chat (README)")
        rpc = self._fields["rpc"]
        assert isinstance(rpc, QLineEdit)
        rpc.setPlaceholderText("none  (e.g. 192.168.1.20:50052, 127.0.0.1:50053)")
        rpc.setToolTip("llama.cpp RPC servers (`specchat rpc-server` on those machines): their devices join this "
                       "machine's for the target model; the draft stays here. No authentication: use a trusted "
                       "network or an SSH tunnel (README, Two machines)")
        self._fields["copy_max"].setToolTip(
            "Lookup and hybrid: the most tokens of a long running copy (a reply repeating earlier text) verified "
            "in one pass. auto: 31. On a GPU a governor of their own judges them; on the CPU, where long verify "
            "batches are dear, only sure copies are taken: agreed for 16 tokens and cut before the next token "
            "the reply already edited once, and on auto up to 47 after one was accepted whole (README, "
            "docs/BENCHMARKS.md)")
        system = self._fields["system_prompt"]
        assert isinstance(system, QPlainTextEdit)
        system.setPlaceholderText("none")
        system.setMaximumHeight(90)
        system.setToolTip("The system prompt of new chats and of chats without their own (Chat → System prompt…)")
        theme = self._fields["theme"]
        assert isinstance(theme, QComboBox)
        theme.addItems(["system", "light", "dark"])
        preset = self._fields["sampling"]
        assert isinstance(preset, QComboBox)
        preset.addItems(list(SAMPLING_PRESETS))
        preset.setToolTip("recommended: the target model's own sampling (its GGUF, else SpecChat's catalogue, else a "
                          "chat default) · greedy: deterministic, exact token for token, no penalties · custom: the "
                          "values below")
        preset.currentTextChanged.connect(self._on_preset_changed)
        groups = (
            ("Generation", (("Max tokens", "n_predict"), ("Sampling", "sampling"), ("Temperature", "temperature"),
                            ("Top-k", "top_k"), ("Top-p", "top_p"), ("Min-p", "min_p"),
                            ("Repeat penalty", "repeat_penalty"), ("Penalty window", "repeat_last_n"),
                            ("Frequency penalty", "frequency_penalty"), ("Presence penalty", "presence_penalty"),
                            ("Seed", "seed"))),
            ("Speculation", (("Draft length K (max)", "draft_max"), ("Draft at least", "draft_min"),
                             ("Stop drafting below p", "draft_p_min"), ("Adaptive", "adaptive"),
                             ("Long copies K (max)", "copy_max"))),
            ("Runtime (applies when models load)", (("Context", "n_ctx"), ("Threads", "n_threads"),
                                                    ("Target GPU layers", "n_gpu_layers"),
                                                    ("Draft GPU layers", "n_gpu_layers_draft"),
                                                    ("", "flash_attn"), ("", "strict"),
                                                    ("RPC servers", "rpc"))),
            ("Chat", (("Default system prompt", "system_prompt"),)),
            ("Local server", (("", "server_enabled"), ("Address", "server_host"), ("Port", "server_port"),
                              ("API key", "server_api_key"))),
            ("Appearance", (("Theme", "theme"),)),
        )
        columns = QHBoxLayout()
        left, right = QVBoxLayout(), QVBoxLayout()
        for i, (title, rows) in enumerate(groups):
            box = QGroupBox(title)
            form = QFormLayout(box)
            for label, key in rows:
                form.addRow(label, self._fields[key])
            (left if i < 2 else right).addWidget(box)
        right.addStretch(1)
        columns.addLayout(left)
        columns.addLayout(right)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(columns)
        layout.addWidget(buttons)
        self._load(settings)
        self._on_preset_changed(settings.sampling)

    def _on_preset_changed(self, preset: str) -> None:
        """The values are the custom preset's: editable only when it is chosen."""
        for key in SAMPLING_FIELDS:
            if key in self._fields:
                self._fields[key].setEnabled(preset == "custom")

    def _load(self, s: Settings) -> None:
        for key, widget in self._fields.items():
            value = getattr(s, key)
            if isinstance(widget, QCheckBox):
                widget.setChecked(bool(value))
            elif isinstance(widget, QComboBox):
                widget.setCurrentText(str(value))
            elif isinstance(widget, QPlainTextEdit):
                widget.setPlainText(str(value))
            elif isinstance(widget, QLineEdit):
                widget.setText(str(value))
            elif isinstance(widget, QSpinBox):
                widget.setValue(-1 if value is None else int(value))
            elif isinstance(widget, QDoubleSpinBox):
                widget.setValue(float(value))

    def changes(self) -> dict[str, Any]:
        """The fields whose value differs from the settings the dialog opened with."""
        out: dict[str, Any] = {}
        for key, widget in self._fields.items():
            value: Any
            if isinstance(widget, QCheckBox):
                value = widget.isChecked()
            elif isinstance(widget, QComboBox):
                value = widget.currentText()
            elif isinstance(widget, QPlainTextEdit):
                value = widget.toPlainText().strip()
            elif isinstance(widget, QLineEdit) and key != "rpc":
                value = widget.text().strip()
            elif isinstance(widget, QLineEdit):
                value = ",".join(e.strip() for e in widget.text().split(",") if e.strip())
            elif isinstance(widget, QSpinBox):
                value = widget.value()
                if key == "seed" and value < 0:
                    value = None
            else:
                assert isinstance(widget, QDoubleSpinBox)
                value = round(widget.value(), widget.decimals())
            if value != getattr(self._settings, key):
                out[key] = value
        return out

    def result_settings(self) -> Settings:
        return replace(self._settings, **self.changes())

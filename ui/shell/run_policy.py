"""Which runs a prompt starts: the chosen mode ("auto" resolved for the loaded pair and this build), the compare
switch and the chat's sampling. No Qt: the window hands over what its controls show (MainWindow.policy)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from app.engine.drafters import auto_mode
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams
from app.models.recommended_sampling import recommended_for
from app.settings import Settings

Runs = list[tuple[str, GenParams]]  # (run name, its parameters): "chat", or "plain" then "spec" when comparing


@dataclass(frozen=True)
class RunPolicy:
    settings: Settings
    chosen: str  # the mode selector: a mode or "auto"
    compare: bool = False  # side by side: plain decoding, then the speculative run, both greedy
    config: PairConfig | None = None  # the loaded pair; None while nothing is loaded
    modes: tuple[str, ...] = ()  # the modes the loaded pair can run (mtp needs the target's MTP head)
    chat_preset: str | None = None  # the chat's own sampling preset; None: the settings'
    gpu_offload: bool = False  # this llama.cpp build can offload to a GPU

    def mode(self, chosen: str | None = None) -> str:
        """The mode the next reply runs: "auto" resolved, so the transcript, the comparison and the banner name
        the mode that really ran."""
        chosen = chosen or self.chosen
        if chosen != "auto":
            return chosen
        has_draft = bool(self.config and self.config.draft)
        return auto_mode(has_draft, self.gpu_offload, "mtp" in self.modes)

    def runs(self) -> Runs:
        mode = self.mode()
        if not self.compare:
            # The chat's own sampling preset, else the settings'; "recommended" takes the loaded target's.
            recommended = recommended_for(self.config.target).values if self.config is not None else None
            preset = self.chat_preset or self.settings.sampling
            return [("chat", self.settings.gen_params(mode, recommended, preset))]
        # The comparison is greedy: its badge checks the two outputs token for token.
        params = self.settings.gen_params(mode, preset="greedy")
        if mode == "none":  # nothing to compare plain decoding with: the speculative side speculates
            params = params.with_mode(self.mode("auto"))
        plain = replace(self.settings.gen_params("none", preset="greedy"), track_margins=True)
        return [("plain", plain), ("spec", params)]

    def chat_run(self) -> Runs:
        """One run, no comparison: continuing a reply extends the chat's answer only."""
        return [("chat", self.runs()[-1][1])]

    def model_names(self) -> dict[str, str | None]:
        """Model names stored with the reply (shown beside it; the mode is stored on its own)."""
        if self.config is None:
            return {}
        mode = self.runs()[-1][1].mode
        draft = Path(self.config.draft).stem if self.config.draft and mode == "draft" else None
        return {"target": Path(self.config.target).stem, "draft": draft}

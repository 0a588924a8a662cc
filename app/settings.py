"""User settings: one typed structure with every default in one place, saved atomically as JSON.

Widgets and commands read fields of `Settings`, never raw keys. Unknown keys from a newer version
are kept on save; a corrupt file is moved aside (never silently overwritten) and reported.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from app import paths
from app.atomic import atomic_write_text
from app.engine.pair_config import PairConfig
from app.engine.sampling import SamplingParams
from app.engine.session import GenParams
from app.engine.speculative import SpecParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    # Models (None: the demo pair)
    target_path: str | None = None
    draft_path: str | None = None
    mode: str = "auto"  # auto | draft | lookup | hybrid | none (app.engine.drafters.CHOICES)
    # Generation
    n_predict: int = 1024
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    # Speculation
    draft_max: int = 6
    draft_min: int = 0
    draft_p_min: float = 0.75
    adaptive: bool = True
    # Runtime
    n_ctx: int = 4096
    n_threads: int = 0
    n_gpu_layers: int = -1
    n_gpu_layers_draft: int = -1
    flash_attn: bool = True
    # Strict exactness: no CPU weight repacking, so verify batches of up to 7 rows run the one-token
    # kernels (the engine keeps K within them: LlamaModel.one_token_kernel_rows); slower, see
    # docs/BENCHMARKS.md. Off by
    # default: llama.cpp repacks, and so do we. (The old `repack` key lands in `extra`, ignored.)
    strict: bool = False
    # Chat: the system prompt of chats that have none of their own ("" for none)
    system_prompt: str = ""
    # Appearance
    theme: str = "system"  # system | light | dark
    show_colours: bool = True
    show_ghosts: bool = True
    compare: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def gen_params(self, mode: str | None = None) -> GenParams:
        return GenParams(
            mode=mode or self.mode,
            n_predict=self.n_predict,
            sampling=SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p, self.seed),
            spec=SpecParams(self.draft_max, self.draft_min, self.draft_p_min, self.adaptive),
        )

    def pair_config(self, target: Path, draft: Path | None) -> PairConfig:
        return PairConfig(target, draft, self.n_gpu_layers, self.n_gpu_layers_draft, self.n_ctx,
                          n_threads=self.n_threads, flash_attn=self.flash_attn, repack=not self.strict)


class SettingsError(ValueError):
    pass


def _coerce(name: str, value: Any, default: Any) -> Any:
    expected = type(default) if default is not None else None
    if expected is None or value is None:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise SettingsError(f"setting {name!r} should be {expected.__name__}, got {value!r}")
    return value


def from_dict(data: dict[str, Any]) -> Settings:
    defaults = Settings()
    known = {f.name for f in fields(Settings)} - {"extra"}
    values = {k: _coerce(k, v, getattr(defaults, k)) for k, v in data.items() if k in known}
    extra = {k: v for k, v in data.items() if k not in known}
    return replace(defaults, **values, extra=extra)


def load(path: Path | None = None) -> tuple[Settings, str | None]:
    """Return the settings and a warning for the user (None when all was well)."""
    path = path or paths.settings_file()
    if not path.exists():
        return Settings(), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise SettingsError("the top level is not a JSON object")
        return from_dict(data), None
    except (OSError, ValueError) as exc:
        aside = path.with_suffix(".json.bad")
        try:
            path.replace(aside)
        except OSError:
            aside = path
        message = f"Settings file {path} could not be read ({exc}); defaults are in use, the old file is at {aside}."
        log.warning(message)
        return Settings(), message


def save(settings: Settings, path: Path | None = None) -> None:
    data = asdict(settings)
    extra = data.pop("extra")
    atomic_write_text(path or paths.settings_file(), json.dumps({**extra, **data}, indent=2, sort_keys=True))

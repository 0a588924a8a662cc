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
from app.engine.spec_params import COPY_MAX_AUTO
from app.engine.speculative import SpecParams
from app.models.recommended_sampling import CHAT_DEFAULT, SamplingValues

log = logging.getLogger(__name__)

SAMPLING_PRESETS = ("recommended", "greedy", "custom")
SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingValues))  # the "custom" preset's values
# Files written before presets existed hold these values unless the user changed them (temperature 0:
# greedy was the default then).
_OLD_SAMPLING_DEFAULTS = {"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
SETTINGS_VERSION = 2


@dataclass(frozen=True)
class Settings:
    # Models (None: the demo pair)
    target_path: str | None = None
    draft_path: str | None = None
    mode: str = "auto"  # auto | draft | lookup | hybrid | none (app.engine.drafters.CHOICES)
    # Generation
    n_predict: int = 1024
    # Sampling preset (SAMPLING_PRESETS): "recommended" (the target model's own recommendation, else a chat
    # default: app.models.recommended_sampling), "greedy" (deterministic argmax without penalties, what the
    # exactness checks and the comparison use) or "custom" (the values below, llama.cpp's names).
    sampling: str = "recommended"
    temperature: float = CHAT_DEFAULT.temperature
    top_k: int = CHAT_DEFAULT.top_k
    top_p: float = CHAT_DEFAULT.top_p
    min_p: float = CHAT_DEFAULT.min_p
    repeat_penalty: float = CHAT_DEFAULT.repeat_penalty
    repeat_last_n: int = CHAT_DEFAULT.repeat_last_n
    frequency_penalty: float = CHAT_DEFAULT.frequency_penalty
    presence_penalty: float = CHAT_DEFAULT.presence_penalty
    seed: int | None = None
    # Speculation
    draft_max: int = 6
    draft_min: int = 0
    draft_p_min: float = 0.75
    adaptive: bool = True
    # Long running copies: their own K limit (0: off, drafted like any other proposal; COPY_MAX_AUTO: 31,
    # app.engine.drafters.AUTO_COPY_MAX; how they are judged follows the device: SpecSession.resolve_spec)
    copy_max: int = COPY_MAX_AUTO
    # Runtime
    n_ctx: int = 4096
    n_threads: int = 0
    n_gpu_layers: int = -1
    n_gpu_layers_draft: int = -1
    flash_attn: bool = True
    # Strict exactness: no CPU weight repacking, and verifies kept within the batches measured at load to give
    # one-token decoding's bits (app/engine/one_token_bound.py); slower, see docs/BENCHMARKS.md. Off by
    # default: llama.cpp repacks, and so do we. (The old `repack` key lands in `extra`, ignored.)
    strict: bool = False
    # llama.cpp RPC servers whose devices the target may use ("HOST:PORT,HOST:PORT"; "" for none)
    rpc: str = ""
    # Chat: the system prompt of chats that have none of their own ("" for none)
    system_prompt: str = ""
    # The local OpenAI-compatible server (app/server) the window runs while this is on: address, and the key
    # clients must send ("" for none; required by any host but loopback)
    server_enabled: bool = False
    server_host: str = "127.0.0.1"
    server_port: int = 8080
    server_api_key: str = ""
    # Appearance
    theme: str = "system"  # system | light | dark
    show_colours: bool = True
    show_ghosts: bool = True
    compare: bool = False
    # The main window's last place and size (Qt's saveGeometry, base64); "" until it was first closed.
    window_geometry: str = ""
    # The file's layout: 2 since long copies default to "auto" (files without it are older: _migrate_copy_max).
    settings_version: int = SETTINGS_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def custom_sampling(self) -> SamplingValues:
        return SamplingValues(**{name: getattr(self, name) for name in SAMPLING_FIELDS})

    def sampling_params(self, recommended: SamplingValues | None = None, preset: str | None = None) -> SamplingParams:
        """The next reply's sampling. `recommended`: the target model's recommendation
        (`app.models.recommended_sampling.recommended_for(target).values`; None: the chat default);
        `preset` replaces this settings' preset (a chat's own, or "greedy" for a comparison)."""
        preset = preset or self.sampling
        if preset == "greedy":
            return SamplingParams(seed=self.seed)
        values = self.custom_sampling() if preset == "custom" else recommended or CHAT_DEFAULT
        return SamplingParams(seed=self.seed, **values.as_dict())

    def gen_params(self, mode: str | None = None, recommended: SamplingValues | None = None,
                   preset: str | None = None) -> GenParams:
        return GenParams(
            mode=mode or self.mode,
            n_predict=self.n_predict,
            sampling=self.sampling_params(recommended, preset),
            spec=SpecParams(self.draft_max, self.draft_min, self.draft_p_min, self.adaptive, copy_max=self.copy_max),
        )

    def pair_config(self, target: Path, draft: Path | None) -> PairConfig:
        return PairConfig(target, draft, self.n_gpu_layers, self.n_gpu_layers_draft, self.n_ctx,
                          n_threads=self.n_threads, flash_attn=self.flash_attn, repack=not self.strict,
                          rpc=tuple(e.strip() for e in self.rpc.split(",") if e.strip()))


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


def _migrate_sampling(data: dict[str, Any]) -> dict[str, Any]:
    """A file from before the sampling presets: the old defaults become "recommended", values the user
    changed become "custom" (without penalties, which did not exist then)."""
    if "sampling" in data:
        return data
    if all(data.get(k, v) == v for k, v in _OLD_SAMPLING_DEFAULTS.items()):
        return {k: v for k, v in data.items() if k not in _OLD_SAMPLING_DEFAULTS}
    return {"repeat_penalty": 1.0, **data, "sampling": "custom"}


def _migrate_copy_max(data: dict[str, Any]) -> dict[str, Any]:
    """A file from before version 2 holds copy_max 0, the old default (files store every field), which was
    no choice: it becomes "auto" (on where the target runs on a GPU). Any other value the user set stays."""
    if "settings_version" in data or data.get("copy_max") != 0:
        return data
    return {**data, "copy_max": COPY_MAX_AUTO}


def from_dict(data: dict[str, Any]) -> Settings:
    defaults = Settings()
    data = _migrate_copy_max(_migrate_sampling(data))
    known = {f.name for f in fields(Settings)} - {"extra"}
    values = {k: _coerce(k, v, getattr(defaults, k)) for k, v in data.items() if k in known}
    if values.get("sampling", defaults.sampling) not in SAMPLING_PRESETS:
        log.warning("Unknown sampling preset %r in the settings; using %r.", values["sampling"], defaults.sampling)
        values["sampling"] = defaults.sampling
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

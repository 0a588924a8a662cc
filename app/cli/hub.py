"""`specchat models search | pull | pull-pair | pairs`: the Hub side of the models command.

Registered through `app.cli.models.register(..., models_hooks=(register_models_hooks,))`. Handlers
return exit codes: 0 done, 1 the download failed (network, hash), 2 bad input (unknown repository,
file or pair, refused token), 130 cancelled. One line on stderr for each error, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from app.models import catalog, hub
from app.models.hub_support import DownloadProgress, HubAuthError, HubCancelled, HubError, HubNotFound

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CANCELLED = 1, 2, 130
DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's `-hf REPO` picks when no file is named


def register_models_hooks(msub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search = msub.add_parser("search", help="search the Hugging Face Hub for GGUF repositories")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--limit", type=int, default=20)
    search.add_argument("--json", action="store_true", help="print one JSON list")
    search.set_defaults(func=_cmd_search)

    pull = msub.add_parser("pull", help="download a GGUF from the Hub (resumable, SHA-256 checked)")
    pull.add_argument("repo", metavar="REPO", help="e.g. Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    pull.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        help=f"file in the repository (default: the {DEFAULT_QUANT} one; all parts of a split model)",
    )
    _common(pull)
    pull.add_argument("--revision", help="branch, tag or commit (default: main)")
    pull.set_defaults(func=_cmd_pull)

    pair = msub.add_parser("pull-pair", help="download a recommended target + draft pair (see `pairs`)")
    pair.add_argument("name", metavar="NAME", help=", ".join(catalog.pair_names()))
    _common(pair)
    pair.set_defaults(func=_cmd_pull_pair)

    pairs = msub.add_parser("pairs", help="the recommended pairs, with repositories, files and sizes")
    pairs.add_argument("--json", action="store_true", help="print one JSON list")
    pairs.add_argument("--to", choices=("cache", "models"), default="cache", help="where to look for copies")
    pairs.set_defaults(func=_cmd_pairs)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--to",
        choices=("cache", "models"),
        default="cache",
        help="the Hugging Face cache (default, honours HF_HOME) or SpecChat's models folder",
    )
    p.add_argument("--json", action="store_true", help="no progress bar; print the result as JSON")


def _error(message: str) -> None:
    print(f"specchat: error: {message}", file=sys.stderr)


def _exit_for(e: HubError) -> int:
    if isinstance(e, HubCancelled):
        return EXIT_CANCELLED
    return EXIT_BAD_INPUT if isinstance(e, HubNotFound | HubAuthError) else EXIT_FAILED


def _guarded(run: Callable[[], int]) -> int:
    try:
        return run()
    except HubError as e:
        _error(str(e))
        return _exit_for(e)
    except catalog.UnknownPair as e:
        _error(str(e))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _error("interrupted; what was downloaded is kept, run the same command again to resume")
        return EXIT_CANCELLED


def _cmd_search(args: argparse.Namespace) -> int:
    def run() -> int:
        found = hub.search_gguf(args.query, args.limit)
        if args.json:
            print(json.dumps([vars(r) for r in found], indent=2))
        elif not found:
            print(f"no GGUF repository matches {args.query!r}")
        else:
            for r in found:
                gated = "  (gated)" if r.gated else ""
                print(f"{r.repo_id:60s} {r.downloads or 0:>10,} downloads{gated}")
        return 0

    return _guarded(run)


def choose_files(files: list[hub.HubFile], wanted: str | None, repo_id: str) -> list[hub.HubFile]:
    """The file asked for (with its split parts), else the repository's only or Q4_K_M model file."""
    if wanted:
        chosen = hub.shards(wanted, files)
        if not chosen:
            raise HubNotFound(f"{wanted} is not a GGUF file of {repo_id}; its GGUF files: {_names(files)}")
        return chosen
    models = [f for f in files if not re.search(r"mmproj|imatrix", f.filename, re.IGNORECASE)]
    firsts = [f for f in models if not re.search(r"-0*([2-9]|\d{2,})-of-\d+\.gguf$", f.filename)]
    if len(firsts) == 1:
        return hub.shards(firsts[0].filename, files)
    quant = [f for f in firsts if DEFAULT_QUANT.lower() in f.filename.lower()]
    if len(quant) == 1:
        return hub.shards(quant[0].filename, files)
    if not firsts:
        raise HubNotFound(f"{repo_id} holds no GGUF model file")
    raise HubNotFound(f"{repo_id} holds several GGUF files; name one: {_names(firsts)}")


def _names(files: list[hub.HubFile]) -> str:
    names = [f.filename for f in files]
    return ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def _cmd_pull(args: argparse.Namespace) -> int:
    def run() -> int:
        files = hub.list_files(args.repo, revision=args.revision)
        chosen = choose_files(files, args.file, args.repo)
        results = []
        for f in chosen:
            with _Bars(args.json) as bars:
                results.append(hub.download(args.repo, f.filename, dest=args.to, revision=args.revision,
                                            progress=bars.single))  # fmt: skip
        _report([r.to_json() for r in results], args.json)
        return 0

    return _guarded(run)


def _cmd_pull_pair(args: argparse.Namespace) -> int:
    from app.models.pair_fetch import fetch_pair

    def run() -> int:
        pair = catalog.find_pair(args.name)
        with _Bars(args.json) as bars:
            got = fetch_pair(pair, dest=args.to, progress=bars.labelled)
        data = {"name": pair.name, "target": str(got.target), "draft": str(got.draft)}
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            print(f"target: {got.target}\ndraft:  {got.draft}")
            print(f"use it: specchat generate -m {got.target} -md {got.draft} -p '...'")
        return 0

    return _guarded(run)


def _cmd_pairs(args: argparse.Namespace) -> int:
    from app.models.pair_fetch import local_pair

    rows = []
    for p in catalog.PAIRS:
        target, draft = local_pair(p, args.to)
        rows.append({**p.to_json(), "local": {"target": target and str(target), "draft": draft and str(draft)}})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        have = "downloaded" if r["local"]["target"] and r["local"]["draft"] else f"~{r['approx_bytes'] / 1e9:.1f} GB"
        print(f"{r['name']:20s} {r['title']}  [{have}]")
        for role in ("target", "draft"):
            m = r[role]
            print(f"    {role:6s} {m['repo_id']} / {m['filename']}  (~{m['approx_bytes'] / 1e9:.2f} GB)")
    print("sizes are approximate; `specchat models pull-pair NAME` downloads and verifies a pair")
    return 0


def _report(results: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
        return
    for r in results:
        how = "already downloaded" if r["already_present"] else f"verified SHA-256 {r['sha256'] or '(git blob)'}"
        print(f"{r['path']}  ({how})")


class _Bars:
    """One tqdm bar per file on stderr (bytes, speed, time left); nothing with --json."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.key = ""

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def labelled(self, role: str, p: DownloadProgress) -> None:
        self._show(f"{role}: {p.filename}", p)

    def single(self, p: DownloadProgress) -> None:
        self._show(p.filename, p)

    def _show(self, label: str, p: DownloadProgress) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        key = f"{label}/{'verify' if p.phase == 'verify' else 'get'}"
        if key != self.key:
            if self.bar is not None:
                self.bar.close()
            desc = ("verifying " if p.phase == "verify" else "") + label
            self.bar = tqdm(total=p.total, initial=p.done, unit="B", unit_scale=True, unit_divisor=1024,
                            desc=desc[-60:], file=sys.stderr, leave=True)  # fmt: skip
            self.key = key
        if p.total and self.bar.total != p.total:
            self.bar.total = p.total
        self.bar.update(p.done - self.bar.n)

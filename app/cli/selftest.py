"""`--self-test`: prove that this installation (a venv or a PyInstaller bundle) can speculate.

Loads a small real GGUF, generates a few tokens through the speculative engine (prompt-lookup
drafting, so one model is enough) and prints one line: tokens/s, where llama.cpp's library was
loaded from, and llama.cpp's system info. A bundle that lacks a shared library, a data file or the
chat template's dependencies fails here, not on a user's desktop. Qt-free: the GUI half lives in
`ui/shell/selftest_gui.py`.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from app import paths

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_AUTO_BYTES = 600 * 2**20  # never pick a big model on our own: the test must take seconds
EXIT_FAILED, EXIT_NO_MODEL = 1, 3


class SelfTestError(RuntimeError):
    pass


def find_model(explicit: Path | None = None) -> Path | None:
    """--model, else $SPECCHAT_SELFTEST_MODEL, else SmolLM2 or the smallest GGUF in the models folders."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get("SPECCHAT_SELFTEST_MODEL"):
        return Path(os.environ["SPECCHAT_SELFTEST_MODEL"])
    folders = [Path(f) for f in (os.environ.get("SPECCHAT_TEST_MODELS"),) if f] + [paths.models_dir()]
    for folder in folders:
        if (folder / SMOL).is_file():
            return folder / SMOL
    candidates = [
        p
        for folder in folders
        if folder.is_dir()
        for p in folder.glob("*.gguf")
        if p.is_file() and p.stat().st_size <= MAX_AUTO_BYTES
    ]
    return min(candidates, key=lambda p: p.stat().st_size) if candidates else None


def bundle_dir() -> Path | None:
    """The PyInstaller bundle's folder when running frozen, else None."""
    meipass = getattr(sys, "_MEIPASS", None)
    return Path(meipass) if getattr(sys, "frozen", False) and meipass else None


def llama_library() -> str:
    """Path of the libllama that llama-cpp-python loaded (app.llama_backend has imported it by now)."""
    module = sys.modules.get("llama_cpp.llama_cpp")
    lib = getattr(module, "_lib", None)
    return str(getattr(lib, "_name", "") or "unknown")


def _check_data_files() -> None:
    prompts = importlib.resources.files("app").joinpath("data/bench_prompts.jsonl").read_text(encoding="utf-8")
    if not prompts.strip():
        raise SelfTestError("app/data/bench_prompts.jsonl is empty")


def placement(lines: list[str]) -> str:
    """Where llama.cpp put the model, from its load report: "layers 31/31 on Vulkan0 (Vulkan0 61 MiB, ...)"."""
    import re

    from app.llama_backend.devices import parse_buffer_report

    layers = next((m for line in lines if (m := re.search(r"offloaded (\d+)/(\d+) layers to GPU", line))), None)
    buffers = [b for b in parse_buffer_report(lines) if b.kind in ("model", "repack") and b.bytes >= 2**19]
    sizes = ", ".join(f"{b.label} {b.bytes / 2**20:.0f} MiB" for b in buffers) or "no buffer report"
    gpus = sorted({b.device for b in buffers if b.device != "CPU"})
    if not gpus:  # llama.cpp counts layers as offloaded even when no GPU exists to take them
        return f"model on the CPU ({sizes})"
    counted = f"layers {layers[1]}/{layers[2]}" if layers else "layers"
    return f"{counted} on {', '.join(gpus)} ({sizes})"


def _generate(model: Path, n_predict: int) -> tuple[int, float, float, str]:
    """Tokens generated, decode tokens/s, load seconds, where the model's layers went."""
    from app.engine.events import FinishEvent, TokenEvent
    from app.engine.pair_config import PairConfig
    from app.engine.session import GenParams, SpecSession
    from app.llama_backend.devices import capture_llama_logs

    start = time.perf_counter()
    with capture_llama_logs() as lines, SpecSession(PairConfig(model, None, n_ctx=512)) as session:
        loaded = time.perf_counter() - start
        placed = placement(lines)
        messages = [{"role": "user", "content": "Reply with one short greeting."}]
        finish: FinishEvent | None = None
        n_token_events = 0
        for event in session.generate_chat(messages, GenParams(mode="lookup", n_predict=n_predict)):
            if isinstance(event, TokenEvent):
                n_token_events += 1
            elif isinstance(event, FinishEvent):
                finish = event
    if finish is None:
        raise SelfTestError("the engine ended without a FinishEvent")
    if not finish.tokens:
        raise SelfTestError(f"the engine generated no tokens (finish reason {finish.stats.finish_reason!r})")
    if n_token_events != len(finish.tokens):
        raise SelfTestError(f"{n_token_events} token events for {len(finish.tokens)} tokens")
    return len(finish.tokens), finish.stats.tokens_per_second, loaded, placed


def run_selftest(model: Path | None = None, n_predict: int = 8) -> int:
    """0 and one report line on success; a clear message on stderr and non-zero otherwise."""
    found = find_model(model)
    if found is None:
        print(
            f"self-test: no model to test with. Pass --model PATH (a small GGUF, e.g. {SMOL}), set "
            f"SPECCHAT_SELFTEST_MODEL, or put {SMOL} in {paths.models_dir()} "
            "(`specchat models fetch-demo --with-smollm2`).",
            file=sys.stderr,
        )
        return EXIT_NO_MODEL
    if not found.is_file():
        print(f"self-test: model {found} does not exist", file=sys.stderr)
        return EXIT_NO_MODEL
    try:
        _check_data_files()
        from app import llama_backend
        from app.llama_backend import devices

        info = " ".join(llama_backend.system_info().split())
        # The devices llama.cpp sees: a GPU bundle that lost its backend library shows only CPU here.
        found_devices = ", ".join(f"{d.name} ({d.type})" for d in devices.list_devices()) or "none"
        # Which CPU module a portable build picked on this processor (issue 53: no SIGILL on older CPUs).
        modules = llama_backend.loaded_backends().describe()
        library = llama_library()
        bundle = bundle_dir()
        if bundle is not None and not Path(library).resolve().is_relative_to(bundle.resolve()):
            raise SelfTestError(f"libllama was loaded from {library}, outside the bundle {bundle}")
        n_tokens, tps, load_s, placed = _generate(found, n_predict)
    except Exception as exc:  # noqa: BLE001 - the self-test reports every failure as one line
        print(f"self-test FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    where = f"bundle {bundle}" if bundle is not None else f"python {sys.prefix}"
    print(
        f"self-test OK: {found.name}, lookup mode, {n_tokens} tokens at {tps:.1f} tok/s "
        f"(load {load_s:.2f} s) | {modules} | devices: {found_devices} | {placed} | libllama: {library} | {where} "
        f"| llama.cpp: {info}",
        flush=True,
    )
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", "-m", type=Path, help=f"a small GGUF to test with (default: {SMOL})")
    parser.add_argument("-n", "--n-predict", type=int, default=8)
    parser.add_argument("--no-gui", action="store_true", help="skip the window check")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specchat --self-test", description="check this installation")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_selftest(args.model, args.n_predict)


if __name__ == "__main__":
    sys.exit(main())

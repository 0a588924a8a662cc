"""llama.cpp's own tools against SpecChat on this device: `specchat bench --native` on each synthetic pair.

The tools (llama-completion, llama-speculative-simple) are built on the CPU machine from the pinned
sdist as docs/BENCHMARKS.md says, and travel without their ggml and llama libraries: at run time they
load the installed wheel's libllama and libggml (the same source, so the same ABI) through
LD_LIBRARY_PATH. On the GPU machine both engines therefore run the very same CUDA kernels, and the
table says what SpecChat's own work per token costs there, where a token takes milliseconds, not tens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

TOOLS = ("llama-completion", "llama-speculative-simple")
# What each pair is asked, most telling first: the demo shape in every mode; the 7B (slow to load, so
# fewer llama.cpp runs); the agreeing pair, where a draft model pays. Prompts from the built-in suite.
PAIRS = {
    "1.5b/0.5b": {"prompts": ("code-refactor", "mt-add-types"), "modes": "none,auto,draft,lookup",
                  "native_modes": "plain,draft-simple,ngram-simple"},
    "7b/0.5b": {"prompts": ("code-refactor",), "modes": "none,auto,draft", "native_modes": "plain,draft-simple"},
    "agreeing-0.5b/2-layer": {"prompts": ("code-refactor",), "modes": "none,auto,draft,lookup",
                              "native_modes": "plain,draft-simple,ngram-simple"},
}
MIN_LEFT_S = 25  # a pair's bench needs about this much at the least (loads, warm-up, one round)
SUMMARY_KEYS = ("median_tokens_per_second", "median_speedup_vs_llama_cpp", "min_speedup_vs_llama_cpp",
                "max_speedup_vs_llama_cpp", "identical", "prompts", "drafted", "accepted", "acceptance_rate",
                "median_engine_overhead")


def tools_dir(folder: Path) -> Path | None:
    """The carried tools' folder, or None where they were not carried (CI's dry run)."""
    return folder if all((folder / t).is_file() for t in TOOLS) else None


def wheel_lib_dir() -> Path:
    import llama_cpp  # the installed wheel: CUDA on the GPU machine, the CPU build in a dry run

    return Path(llama_cpp.__file__).resolve().parent / "lib"


def prompts_file(ids: tuple[str, ...], n_predict: int, path: Path, root: Path) -> Path:
    rows = [json.loads(line) for line in (root / "app" / "data" / "bench_prompts.jsonl").read_text().splitlines()
            if line.strip()]
    chosen = [dict(r, n_predict=n_predict) for r in rows if r["id"] in ids]
    if len(chosen) != len(ids):
        raise ValueError(f"the built-in bench suite lacks one of {ids}")
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


def run_pair(pair: str, target: Path, draft: Path, tools: Path, out: Path, root: Path, *, n_predict: int,
             repeat: int, threads: int, timeout_s: float, extra: tuple[str, ...] = (), tag: str = "") -> dict:
    """One `specchat bench --native` on one pair, with `extra` bench options; its JSON goes to
    out/bench-<pair><tag>.json."""
    what = PAIRS[pair]
    slug = pair.replace("/", "_") + tag
    json_out = out / f"bench-{slug}.json"
    prompts = prompts_file(what["prompts"], n_predict, out / f".prompts-{slug}.jsonl", root)
    cmd = [sys.executable, "-m", "app.cli", "bench", "--native", str(tools), "--prompts", str(prompts),
           "--modes", what["modes"], "--native-modes", what["native_modes"], "--repeat", str(repeat),
           "--processes", "shared", "--json-out", str(json_out), "-m", str(target), "-md", str(draft),
           "-ngl", "-1", "-ngld", "-1", "-c", "4096", "--sampling", "greedy", "--force"]
    if threads:
        cmd += ["-t", str(threads)]
    cmd += extra
    libs = f"{wheel_lib_dir()}:{tools}"
    env = dict(os.environ, LD_LIBRARY_PATH=libs + (":" + os.environ["LD_LIBRARY_PATH"]
                                                    if os.environ.get("LD_LIBRARY_PATH") else ""),
               PYTHONPATH=str(root) + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    print("   $ " + " ".join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    print(proc.stdout, proc.stderr[-3000:], sep="\n", flush=True)
    prompts.unlink(missing_ok=True)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-6:]
        raise RuntimeError(f"bench on {pair} exited with status {proc.returncode}: " + " | ".join(last))
    report = json.loads(json_out.read_text())
    return {
        "prompts": list(what["prompts"]), "n_predict": n_predict, "repeat": repeat, "extra": list(extra),
        "seconds": round(time.monotonic() - start, 1), "bench_json": json_out.name,
        "native_version": report.get("native", {}).get("version"),
        "native_system_info": report.get("native", {}).get("system_info"),
        "modes": {mode: {k: s.get(k) for k in SUMMARY_KEYS} for mode, s in report["summary"].items()},
        "per_prompt": {f"{r['prompt_id']}:{r['mode']}": r.get("speedup_vs_llama_cpp") for r in report["runs"]},
    }


def run_pairs(pairs: dict[str, tuple[Path, Path]], tools: Path, out: Path, root: Path, *, n_predict: int, repeat: int,
              threads: int, left: Callable[[], float], extra: tuple[str, ...] = (),
              tag: str = "") -> Iterator[tuple[str, dict, str | None]]:
    """run_pair on each (target, draft) pair while `left()` seconds allow: (pair, result, traceback or None).

    A pair that fails or finds too little time left is reported as such, and the next one still runs."""
    for pair, (target, draft) in pairs.items():
        if left() < MIN_LEFT_S:
            yield pair, {"skipped": f"{left():.0f} s left"}, None
            continue
        try:
            yield pair, run_pair(pair, target, draft, tools, out, root, n_predict=n_predict, repeat=repeat,
                                 threads=threads, timeout_s=max(left() - 5, 10), extra=extra, tag=tag), None
        except Exception as exc:  # noqa: BLE001 - the next pair still runs
            yield pair, {"failed": f"{type(exc).__name__}: {exc}"}, traceback.format_exc()

"""Time the packaged app from launch to its main window on screen (and to the models loaded).

    .venv/bin/python packaging/measure_startup.py dist/SpecChat/SpecChat [--runs 5] [--models]
                                                  [--cold] [--offscreen]

Each run starts the binary with the startup probe on (`SPECCHAT_STARTUP_PROBE`, see
ui/shell/selftest_gui.py), on a throw-away profile, and reads two numbers: from our `Popen` call to the
first exposed window (what a user waits for after a double-click), and the same from the process's
own start time. The app quits itself once the window is up (or, with --models, once the demo pair
from the models folder has loaded on the worker thread). Without a display an Xvfb server is
started for the runs (real X11 through the xcb plugin), or the offscreen platform with --offscreen.
--cold drops the page cache before each run (Linux, root), for a first-launch figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def start_xvfb() -> tuple[subprocess.Popen[bytes] | None, str | None]:
    if shutil.which("Xvfb") is None:
        return None, None
    for number in range(99, 120):
        if Path(f"/tmp/.X11-unix/X{number}").exists():
            continue
        server = subprocess.Popen(
            ["Xvfb", f":{number}", "-screen", "0", "1920x1080x24", "-nolisten", "tcp"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if Path(f"/tmp/.X11-unix/X{number}").exists():
                return server, f":{number}"
            time.sleep(0.05)
        server.kill()
    return None, None


def one_run(binary: Path, env: dict[str, str], until: str, cold: bool, timeout_s: float) -> dict[str, float]:
    if cold:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    with tempfile.TemporaryDirectory(prefix="specchat-startup-") as tmp:
        report = Path(tmp) / "probe.json"
        run_env = dict(
            env,
            SPECCHAT_HOME=str(Path(tmp) / "home"),
            SPECCHAT_STARTUP_PROBE=str(report),
            SPECCHAT_STARTUP_PROBE_QUIT=until,
        )
        launched = time.time()
        proc = subprocess.run([str(binary)], env=run_env, capture_output=True, text=True, timeout=timeout_s)
        total = time.time() - launched
        if not report.is_file():
            raise SystemExit(f"measure_startup: no probe report (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        result = json.loads(report.read_text())
    out = {
        "launch_to_window_s": result["wall_time"] - launched,
        "process_to_window_s": result["window_shown_s"],
        "until_exit_s": total,
    }
    if "models_loaded_s" in result:
        out["process_to_models_s"] = result["models_loaded_s"]
    out["platform"] = result.get("platform", "?")  # type: ignore[assignment]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--models", action="store_true", help="keep the models folder (demo pair) and wait until the models are loaded"
    )
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each run (root)")
    parser.add_argument("--offscreen", action="store_true", help="QT_QPA_PLATFORM=offscreen instead of Xvfb")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    server = None
    if args.offscreen:
        env["QT_QPA_PLATFORM"] = "offscreen"
    elif not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        server, display = start_xvfb()
        if display:
            env["DISPLAY"] = display
            env.pop("QT_QPA_PLATFORM", None)
        else:
            env["QT_QPA_PLATFORM"] = "offscreen"
    empty_models = tempfile.TemporaryDirectory(prefix="specchat-nomodels-")
    if not args.models:
        env["SPECCHAT_MODELS_DIR"] = empty_models.name  # first launch: no models, the picker opens
    elif not env.get("SPECCHAT_MODELS_DIR"):
        from app import paths  # the user's models folder, as the app itself would use

        env["SPECCHAT_MODELS_DIR"] = str(paths.models_dir())
    try:
        runs = [
            one_run(args.binary, env, "models" if args.models else "window", args.cold, 300) for _ in range(args.runs)
        ]
    finally:
        empty_models.cleanup()
        if server is not None:
            server.terminate()
    keys = [k for k in runs[0] if k.endswith("_s")]
    summary = {
        k: {"first": runs[0][k], "median": statistics.median(r[k] for r in runs), "max": max(r[k] for r in runs)}
        for k in keys
    }
    if args.json:
        print(json.dumps({"runs": runs, "summary": summary}, indent=2))
    else:
        print(f"{len(runs)} runs, platform {runs[0]['platform']}{', cold cache' if args.cold else ''}:")
        for k, v in summary.items():
            print(f"  {k:22s} first {v['first']:.2f} s   median {v['median']:.2f} s   max {v['max']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

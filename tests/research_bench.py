"""Run the research bench as a developer does from a checkout: `python -m tools.bench ...` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RESEARCH_BENCH = [sys.executable, "-m", "tools.bench"]


def research_bench(*args: object, home: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECCHAT_HOME=str(home))
    env.pop("SPECCHAT_MODELS_DIR", None)
    return subprocess.run([*RESEARCH_BENCH, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=Path(__file__).resolve().parent.parent)

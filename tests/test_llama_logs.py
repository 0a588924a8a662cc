"""llama.cpp's log lines reach Python while the app runs, and stop doing so at exit.

At the Vulkan package's first start the window quit while the picker's device discovery (a daemon thread) was
still inside Vulkan's start-up; its log lines called into a Python that was shutting down, which ended the thread
with a forced unwind inside ggml_backend_vk_reg's `catch (...)`: "FATAL: exception not rethrown", and an abort.
So the exit hooks hand llama.cpp's logs back to its own stderr logger. Each check runs in a child process: it
changes process-wide llama.cpp state.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import atexit, llama_cpp
    from app.llama_backend import core

    core.ensure_backend()
    lines = []
    core.add_log_sink(lambda level, text: lines.append(text))

    def fail_to_load():  # llama.cpp logs why, from C++
        params = llama_cpp.llama_model_default_params()
        assert not llama_cpp.llama_model_load_from_file(b"/nonexistent/model.gguf", params)

    fail_to_load()
    running = len(lines)
    atexit._run_exitfuncs()  # what the interpreter runs before it stops other threads
    fail_to_load()
    print(running, len(lines) - running)
""")


def test_llama_logs_leave_python_at_exit() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    running, after_exit = map(int, done.stdout.split())
    assert running > 0  # while running: through Python (the sinks, Python logging)
    assert after_exit == 0  # after the exit hooks: llama.cpp's own logger
    assert "failed to load model" in done.stderr  # ... which still says it, on stderr

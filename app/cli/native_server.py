"""llama.cpp's `llama-server`, kept loaded for a whole bench: the native mode `server-plain`.

Why: `llama-completion` is one process per timed run, while the app is one long-lived process. A server loaded
once and timed in the same rounds as SpecChat's runs in the bench's own process (`--processes shared`) pairs a
long-lived llama.cpp with a long-lived SpecChat, as a user's app and a user's llama-server are. It was hoped to
steady the baseline too (one-token steps sat at 44 or 58 ms in different processes, run 38); it does not: its
rounds swing as much as llama-completion's, so the swings are the machine's over time (docs/BENCHMARKS.md, run 39).

Each run POSTs the exact prompt token ids SpecChat rendered to /completion, with `cache_prompt` off so the whole
prompt is processed each time, and reads the server's own timings: `predicted_n` tokens, of which the first comes
from the prompt's logits, in `predicted_ms` from the prompt's end to the last token: (n - 1) / ms, SpecChat's
and llama-completion's measure. `content`, the reply's text, is compared with SpecChat's plain reply as
llama-completion's is.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from app.cli.native_bench import NativeResult, NativeSettings, model_args, output_tail
from app.cli.options import UserError

SERVER = "llama-server"
HOST = "127.0.0.1"


class ServerError(UserError):
    """llama-server could not start or answer: one clear line, exit 2."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def server_command(settings: NativeSettings, port: int, spec_args: tuple[str, ...] = ()) -> list[str]:
    """llama-server with the same model, context, batch, threads, attention, repacking, layers and KV types as
    llama-completion gets from the bench (native_bench.command), one slot, no web UI, no prompt cache;
    `spec_args`: its speculation (`--spec-type ngram-map-k`, bench-serve's n-gram columns)."""
    s = settings
    return [str(Path(s.bin_dir) / SERVER), *model_args(s), "-b", str(s.n_batch), "-ub", str(s.n_batch),
            "-tb", str(s.n_threads), "-np", "1", "--no-webui", "--no-cache-prompt", "--cache-ram", "0",
            "--host", HOST, "--port", str(port), *spec_args, *s.extra_args]


def check_tool(bin_dir: Path, flag: str = "--native-modes server-plain") -> Path:
    path = Path(bin_dir) / SERVER
    if not path.is_file():
        raise ServerError(f"{flag}: {path} is missing; build the llama-server target as "
                          "docs/BENCHMARKS.md says (section \"Comparing with llama.cpp itself\")")
    return path


class NativeServer:
    """One llama-server process for the bench's lifetime; `complete` times one reply on it, and `base_url` is its
    OpenAI-compatible API (bench-serve). `name` names its log file: several may run side by side."""

    def __init__(self, settings: NativeSettings, log_dir: Path, spec_args: tuple[str, ...] = (),
                 name: str = SERVER) -> None:
        self.settings = settings
        self._log_path = Path(log_dir) / f"{name}.log"
        check_tool(settings.bin_dir)
        self.port = _free_port()
        self.command = server_command(settings, self.port, spec_args)
        self._log = open(self._log_path, "wb")  # noqa: SIM115 (kept open while the server runs)
        self._proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(settings.timeout_s)
        except ServerError:
            self.close()  # the caller never gets this object to close: stop the process, close its log
            raise

    def _url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    @property
    def base_url(self) -> str:
        return self._url("/v1")

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerError(f"llama-server exited with status {self._proc.returncode} while loading"
                                  f"{self._log_tail()}")
            try:
                with urllib.request.urlopen(self._url("/health"), timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise ServerError(f"llama-server did not answer /health within {timeout_s:.0f} s{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return output_tail(self._log_path.read_text(errors="replace"), what="log")
        except OSError:
            return ""

    def complete(self, mode: str, tokens: list[int], n_predict: int) -> NativeResult:
        """One reply as the bench's row `mode`, timed by the server's own timings."""
        s = self.settings
        body: dict[str, Any] = {
            "prompt": list(tokens), "n_predict": n_predict, "cache_prompt": False, "return_tokens": True,
            "stream": False, "temperature": s.temp, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
            "repeat_penalty": s.repeat_penalty, "repeat_last_n": s.repeat_last_n,
            "frequency_penalty": s.frequency_penalty, "presence_penalty": s.presence_penalty}
        if s.seed is not None and s.seed >= 0:
            body["seed"] = s.seed
        request = urllib.request.Request(self._url("/completion"), data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=s.timeout_s) as r:
                data = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServerError(f"llama-server /completion failed: {exc}{self._log_tail()}") from exc
        timings = data.get("timings") or {}
        n, ms = int(timings.get("predicted_n", 0)), float(timings.get("predicted_ms", 0.0))
        if n < 1 or "tokens" not in data:
            raise ServerError(f"llama-server's reply has no timings or tokens: {sorted(data)}")
        if int(timings.get("prompt_n", -1)) != len(tokens):
            raise ServerError(f"llama-server processed {timings.get('prompt_n')} prompt tokens, not the {len(tokens)} "
                              "sent: its timings would not be comparable")
        return NativeResult(mode, (*self.command, "POST /completion"), n,
                            (n - 1) * 1000.0 / ms if ms > 0 and n > 1 else 0.0, ms,
                            float(timings.get("prompt_ms", 0.0)), text=str(data.get("content", "")))

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

"""Huge pages for llama.cpp's buffers: when the entry points re-exec themselves with glibc's tunable, that a real
`specchat generate` then holds its model buffers in huge pages, and that llama.cpp's own tools get the environment
users start them with."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from app import huge_pages
from app.huge_pages import BEFORE_ENV, OFF_ENV, TUNABLE, native_env, thp_mode, why_not

GLIBC = ("glibc", "2.36")


@pytest.mark.parametrize(("env", "system", "libc", "thp", "reason"), [
    ({}, "linux", GLIBC, "madvise", None),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "linux", GLIBC, "madvise", None),
    ({OFF_ENV: "0"}, "linux", GLIBC, "madvise", "turned off"),
    ({OFF_ENV: "1"}, "linux", GLIBC, "madvise", None),
    ({BEFORE_ENV: ""}, "linux", GLIBC, "madvise", "already set"),  # the re-exec'd process: never a second exec
    ({"GLIBC_TUNABLES": TUNABLE}, "linux", GLIBC, "madvise", "already set"),
    ({}, "darwin", ("", ""), "madvise", "not Linux"),
    ({}, "linux", ("glibc", "2.31"), "madvise", "needs glibc 2.35"),
    ({}, "linux", ("", ""), "madvise", "needs glibc 2.35"),  # musl
    ({}, "linux", GLIBC, "always", "THP setting is always"),
    ({}, "linux", GLIBC, "never", "THP setting is never"),
    ({}, "linux", GLIBC, None, "THP setting is unknown"),
])
def test_when_to_reexec(env, system, libc, thp, reason):
    got = why_not(env, system, libc, thp)
    assert got is None if reason is None else reason in (got or "")


def test_thp_mode_reads_the_bracketed_setting(tmp_path):
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    assert thp_mode(setting) == "madvise"
    setting.write_text("[always] madvise never\n")
    assert thp_mode(setting) == "always"
    assert thp_mode(tmp_path / "missing") is None


@pytest.mark.parametrize(("before", "restored"), [("", None), ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2")])
def test_native_tools_start_as_users_start_them(monkeypatch, before, restored):
    monkeypatch.setenv(BEFORE_ENV, before)
    monkeypatch.setenv("GLIBC_TUNABLES", f"{before}:{TUNABLE}" if before else TUNABLE)
    env = native_env(huge_pages=False)
    assert env.get("GLIBC_TUNABLES") == restored
    assert BEFORE_ENV not in env
    with_pages = native_env(huge_pages=True)["GLIBC_TUNABLES"]
    assert with_pages.split(":").count(TUNABLE) == 1 and (not before or with_pages.startswith(before))


def _generate(smol_path: Path, tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", BEFORE_ENV, OFF_ENV)}
    env.update(SPECCHAT_HOME=str(tmp_path), **extra)
    cmd = [sys.executable, "-m", "app.cli", "generate", "--json", "-m", str(smol_path), "--mode", "none", "-n", "4",
           "-c", "2048", "-p", "Say hi"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["huge_pages"]


def test_generate_reexecs_with_huge_pages_where_they_help(smol_path, tmp_path):
    """A real `specchat generate` started without the tunable: on Linux with glibc and the `madvise` THP setting
    it runs with it, and its model buffers sit in huge pages; elsewhere it says why not."""
    reason = why_not({}, sys.platform, platform.libc_ver(), thp_mode())
    on = _generate(smol_path, tmp_path)
    off = _generate(smol_path, tmp_path, **{OFF_ENV: "0"})
    assert off["tunable"] is False and "turned off" in off["why_not"]
    if reason is not None:
        assert on["tunable"] is False and on["why_not"] == reason
        return
    assert on["tunable"] is True and on["why_not"] is None
    # SmolLM2's KV cache and compute buffers alone are tens of MiB; without the tunable nothing asks for huge pages
    assert on["anon_huge_mib"] >= 8 > off["anon_huge_mib"], (on, off)


def test_report_in_this_process():
    report = huge_pages.report()
    assert report["tunable"] == (TUNABLE in os.environ.get("GLIBC_TUNABLES", ""))
    assert report["thp"] == thp_mode()

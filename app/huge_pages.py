"""Transparent huge pages for llama.cpp's CPU buffers (Linux with glibc 2.35 or later).

Why: on a CPU every generated token reads all the weights. llama.cpp's repacked weights, KV cache and compute
buffers come from malloc, and under the usual `madvise` THP setting they get 4 KiB pages. glibc's
`glibc.malloc.hugetlb=1` tunable makes malloc advise huge pages for its large chunks: one-token steps 3% shorter on
the 2-core AMD EPYC, for llama.cpp's own tools as for SpecChat (docs/BENCHMARKS.md, run 39). glibc reads tunables
only when a process starts, so the entry points re-exec themselves once with it set (`reexec_with_huge_pages`).
Advising the loaded buffers afterwards is no substitute: MADV_COLLAPSE was refused (EINVAL) on that machine's
kernel, and MADV_HUGEPAGE alone leaves already-touched pages to khugepaged (20 MiB of 828 after loading).
SPECCHAT_HUGE_PAGES=0 turns it off. llama.cpp's tools in `specchat bench --native` run as users start them, with
the tunables this process started with (`native_env`).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb=1"
OFF_ENV = "SPECCHAT_HUGE_PAGES"  # "0": no re-exec
BEFORE_ENV = "SPECCHAT_TUNABLES_BEFORE"  # GLIBC_TUNABLES as the first process had it; also marks the re-exec done
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
MIN_GLIBC = (2, 35)  # the first glibc with glibc.malloc.hugetlb


def thp_mode(path: Path = THP_SETTING) -> str | None:
    """The kernel's THP setting ("always", "madvise" or "never"), None where it cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def why_not(env: Mapping[str, str], system: str, libc: tuple[str, str], thp: str | None) -> str | None:
    """Why this process should not re-exec itself with the tunable, or None if it should."""
    if env.get(OFF_ENV) == "0":
        return f"turned off ({OFF_ENV}=0)"
    if BEFORE_ENV in env or TUNABLE in env.get("GLIBC_TUNABLES", ""):
        return "already set"
    if not system.startswith("linux"):
        return "not Linux"
    name, version = libc
    if name != "glibc" or tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < MIN_GLIBC:
        return f"needs glibc {'.'.join(map(str, MIN_GLIBC))} or later (this is {name or 'not glibc'} {version})"
    if thp != "madvise":  # "always" gives large allocations huge pages anyway; "never" gives none
        return f"the kernel's THP setting is {thp or 'unknown'}"
    return None


def tunable_set(env: Mapping[str, str] | None = None) -> bool:
    return TUNABLE in (os.environ if env is None else env).get("GLIBC_TUNABLES", "")


def reexec_with_huge_pages() -> None:
    """Replace this process by itself with glibc's huge-page tunable added, where that helps (see `why_not`).

    Call first thing in an entry point, before threads or open windows: os.execv keeps the pid, the open files and
    the command line, and nothing of this process's state. Returns where no re-exec is wanted or exec fails."""
    if why_not(os.environ, sys.platform, platform.libc_ver(), thp_mode()) is not None:
        return
    env = dict(os.environ)
    before = env.get("GLIBC_TUNABLES", "")
    env[BEFORE_ENV] = before
    env["GLIBC_TUNABLES"] = f"{before}:{TUNABLE}" if before else TUNABLE
    if getattr(sys, "frozen", False):
        env["PYINSTALLER_RESET_ENVIRONMENT"] = "1"  # a new instance of the bundle, not a child of this one
        args = [sys.executable, *sys.argv[1:]]
    else:
        args = [sys.executable, *sys.orig_argv[1:]]
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, args, env)
    except OSError:  # an unusual interpreter setup: run on with 4 KiB pages, as without the tunable
        return


def native_env(huge_pages: bool) -> dict[str, str]:
    """The environment for llama.cpp's own tools: as this process started (GLIBC_TUNABLES restored), or with the
    tunable (huge_pages: the same memory setting as SpecChat, for a comparison of the code alone)."""
    env = dict(os.environ)
    before = env.pop(BEFORE_ENV, None)
    if before is not None:
        if before:
            env["GLIBC_TUNABLES"] = before
        else:
            env.pop("GLIBC_TUNABLES", None)
    if huge_pages and not tunable_set(env):
        current = env.get("GLIBC_TUNABLES", "")
        env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}" if current else TUNABLE
    return env


def anon_huge_mib(pid: int | str = "self") -> int | None:
    """MiB of this process's anonymous memory in huge pages (AnonHugePages), None where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) >> 10
    except (OSError, ValueError):
        return None
    return None


def report() -> dict[str, object]:
    """What this process has, for JSON reports: the tunable, the kernel's setting, the huge-page MiB in use."""
    return {"tunable": tunable_set(), "thp": thp_mode(), "anon_huge_mib": anon_huge_mib(),
            "why_not": None if tunable_set() else why_not({k: v for k, v in os.environ.items() if k != BEFORE_ENV},
                                                          sys.platform, platform.libc_ver(), thp_mode())}

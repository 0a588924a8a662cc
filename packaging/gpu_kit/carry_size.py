"""What travels to the GPU machine with `run`: the working tree git does not ignore, plus the carried
folder. The device tool refuses more than 64 MiB.

    python packaging/gpu_kit/carry_size.py [--bytes]   # the total and the largest parts (--bytes: the number)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARRY = Path("packaging/gpu_kit/carry")
LIMIT = 64 << 20


def travelling_files(root: Path = ROOT) -> list[Path]:
    """Tracked and untracked-not-ignored files, and everything under the carried folder."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, check=True,
                                capture_output=True).stdout.decode().split("\0")
        files = [root / p for p in listed if p]
    except (OSError, subprocess.CalledProcessError):  # no git (the GPU machine's copy): all of it
        files = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
        return sorted(files)
    carried = root / CARRY
    files += [p for p in carried.rglob("*") if p.is_file()] if carried.is_dir() else []
    return sorted(set(files))


def carry_bytes(root: Path = ROOT, exclude: Path | None = None) -> int:
    total = 0
    for p in travelling_files(root):
        if exclude is not None and exclude in p.parents:
            continue
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def main() -> int:
    if "--bytes" in sys.argv[1:]:
        print(carry_bytes())
        return 0
    files = [(p.stat().st_size, p) for p in travelling_files() if p.is_file() and not p.is_symlink()]
    total = sum(s for s, _ in files)
    for size, path in sorted(files, reverse=True)[:8]:
        print(f"{size / (1 << 20):8.2f} MiB  {path.relative_to(ROOT)}")
    state = "within" if total <= LIMIT else "OVER"
    print(f"carry total: {total:,} bytes ({total / (1 << 20):.2f} MiB), {state} the 64 MiB limit")
    return 0 if total <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())

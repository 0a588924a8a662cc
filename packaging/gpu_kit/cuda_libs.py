"""Print the folders (colon-separated) holding libcudart.so.13 and libcublas.so.13 on this machine:
the NVIDIA Python packages first (the GPU image's PyTorch carries them), then the CUDA toolkit."""

from __future__ import annotations

import site
import sys
from pathlib import Path

NEEDED = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")


def roots() -> list[Path]:
    found = [Path(p) for p in [*site.getsitepackages(), site.getusersitepackages(), *sys.path] if p]
    return [*found, Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/targets/x86_64-linux/lib"),
            Path("/usr/lib/x86_64-linux-gnu")]


def main() -> int:
    dirs: dict[str, Path] = {}
    for root in roots():
        if not root.is_dir():
            continue
        for name in NEEDED:
            if name in dirs:
                continue
            direct = root / name
            hits = [direct] if direct.is_file() else list(root.glob(f"nvidia/*/lib/{name}"))
            if hits:
                dirs[name] = hits[0].parent
    missing = [n for n in NEEDED if n not in dirs]
    if missing:
        print(f"cuda_libs: not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(":".join(dict.fromkeys(str(d) for d in dirs.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

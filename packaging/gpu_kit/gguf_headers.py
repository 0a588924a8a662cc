"""The carried headers: a real GGUF's metadata, tokenizer and tensor table, without its weights.

    python packaging/gpu_kit/gguf_headers.py OUT_DIR      # from the demo pair in the models folder

A header file is a GGUF with no tensors that holds every key/value of the source file (architecture,
tokenizer, chat template) plus `specchat.tensors`, the source's tensor table as JSON (name, ggml
dims, type, in file order), gzip-compressed: about 2.5 MB per model where the weights are 0.5-1.1 GB.
`synth_gguf.py` turns it back into a full-size model with valid random blocks on the GPU machine.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, GGUFWriter

TENSORS_KEY = "specchat.tensors"
SOURCES = {  # header name -> the demo file it is copied from
    "demo-target": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "demo-draft": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
# Keys GGUFWriter writes itself.
_OWN_KEYS = {"general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


@dataclass(frozen=True)
class Header:
    name: str
    fields: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]  # key -> value, type, item type
    tensors: list[tuple[str, list[int], str]]  # name, ggml dims (ne0 first), type name

    @property
    def arch(self) -> str:
        return str(self.fields["general.architecture"][0])

    def value(self, key: str) -> Any:
        return self.fields[key][0]


def read_fields(reader: GGUFReader) -> dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]:
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        out[key] = (field.contents(), vtype, sub)
    return out


def extract(source: Path, dest: Path) -> Path:
    """Write `dest` (.gguf.gz): the source's keys and tensor table, no weights."""
    reader = GGUFReader(source)
    table = [[t.name, [int(d) for d in t.shape], t.tensor_type.name] for t in reader.tensors]
    fields = read_fields(reader)
    fields[TENSORS_KEY] = (json.dumps(table), GGUFValueType.STRING, None)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "header.gguf"
        write_kv_only(raw, str(fields["general.architecture"][0]), fields)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with raw.open("rb") as src, gzip.open(dest, "wb", compresslevel=9) as out:
            shutil.copyfileobj(src, out)
    return dest


def write_kv_only(path: Path, arch: str, fields: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]) -> None:
    writer = GGUFWriter(path, arch)
    add_fields(writer, fields)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def add_fields(writer: GGUFWriter, fields: dict[str, tuple[Any, GGUFValueType, GGUFValueType | None]]) -> None:
    for key, (value, vtype, sub) in fields.items():
        if key not in _OWN_KEYS:
            writer.add_key_value(key, value, vtype, sub_type=sub)


def load(path: Path) -> Header:
    """Read a header file written by `extract`."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "header.gguf"
        with gzip.open(path, "rb") as src, raw.open("wb") as out:
            shutil.copyfileobj(src, out)
        fields = read_fields(GGUFReader(raw))
    table = json.loads(fields.pop(TENSORS_KEY)[0])
    name = path.name.split(".")[0]
    return Header(name, fields, [(str(n), [int(d) for d in dims], str(t)) for n, dims, t in table])


def extract_demo(models_dir: Path, out_dir: Path) -> list[Path]:
    """Header files of the demo pair, skipping any already there."""
    written = []
    for name, filename in SOURCES.items():
        dest = out_dir / f"{name}.gguf.gz"
        if not dest.is_file():
            source = models_dir / filename
            if not source.is_file():
                raise FileNotFoundError(f"{source} is missing: run `specchat models fetch-demo` first")
            extract(source, dest)
        written.append(dest)
    return written


def main(argv: list[str]) -> int:
    from app import paths

    out = Path(argv[0]) if argv else Path(__file__).parent / "carry" / "headers"
    for path in extract_demo(paths.models_dir(), out):
        print(f"{path}  {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

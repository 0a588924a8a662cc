"""llama.cpp's devices, build capabilities and its own buffer report (imports `llama_cpp`).

To be folded into / re-exported by `app.llama_backend`, the project's one llama_cpp module.

* `list_devices()`: the ggml backend devices of the loaded ggml library (`ggml_backend_dev_*`), with
  the same free/total memory llama.cpp uses to split layers (CUDA, HIP, Metal, Vulkan, CPU).
* `capabilities()`: GPU offload support, registered backends, CPU features.
* `capture_llama_logs()`: collect llama.cpp's log lines, restoring the previous callback after.
* `parse_buffer_report(lines)`: the "... buffer size = N MiB" lines as `MeasuredBuffer`s.
* `measure_model(path, ...)`: load a model and a context, report their buffers, free both.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import llama_cpp
import llama_cpp._ggml as _ggml

from app.llama_backend.backend_modules import LoadedBackends
from app.llama_backend.core import (
    add_log_sink,
    device_array,
    ensure_backend,
    loaded_backends,
    remove_log_sink,
    supports_gpu_offload,
)
from app.llama_backend.gpu_hint import UnusedGpu, unused_gpu
from app.memory.predict import REPACK_ARM_I8MM, REPACK_X86, Buffer, BuildSpec, GpuSpec, ModelSettings

DeviceType = Literal["cpu", "gpu", "igpu", "accel", "meta"]
_DEV_TYPES: dict[int, DeviceType] = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_GGML_TYPES = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}
_lock = threading.Lock()
_protos_ready = False


class _DevCaps(ctypes.Structure):
    _fields_ = [(n, ctypes.c_bool) for n in ("async_", "host_buffer", "buffer_from_host_ptr", "events", "mmap_support")]


class _DevProps(ctypes.Structure):  # struct ggml_backend_dev_props (ggml-backend.h)
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("memory_free", ctypes.c_size_t),
        ("memory_total", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("device_id", ctypes.c_char_p),
        ("caps", _DevCaps),
    ]


class _InitParams(ctypes.Structure):  # struct ggml_init_params (ggml.h)
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class MeasureError(RuntimeError):
    """llama.cpp refused to load the model or create the context; the message says what to try."""


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "CUDA0", "Vulkan0", "MTL0" ...
    description: str
    type: DeviceType
    free_bytes: int
    total_bytes: int
    device_id: str | None = None  # PCI bus id "0000:c1:00.0" where the backend knows it (matches NVML)
    maps_host: bool = False  # weights can be mapped from the mmapped file (Metal) instead of copied
    alignment: int = 0  # the device buffer type's tensor alignment (0: unknown)
    max_tensor_bytes: int = 0  # the largest weight the device takes (Vulkan); 0: no such limit


@dataclass(frozen=True)
class Capabilities:
    gpu_offload: bool
    backends: tuple[str, ...]
    cpu_features: frozenset[str]
    system_info: str
    loaded: LoadedBackends | None = None  # the backend modules loaded at start (portable builds)
    unused_gpu: UnusedGpu | None = None  # a GPU of this machine that the build cannot drive


@dataclass(frozen=True)
class MeasuredBuffer:
    kind: Literal["model", "repack", "kv", "output", "compute", "overhead"]
    device: str  # "CPU" for host memory (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host ...), else the GPU
    bytes: int
    label: str  # llama.cpp's buffer name
    role: str | None = None


def _lib() -> ctypes.CDLL:
    global _protos_ready
    lib = _ggml.libggml
    if not _protos_ready:
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, args, res in (
            ("ggml_backend_dev_count", [], sz),
            ("ggml_backend_dev_get", [sz], vp),
            ("ggml_backend_dev_name", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_description", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_type", [vp], ctypes.c_int),
            ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
            ("ggml_backend_reg_count", [], sz),
            ("ggml_backend_reg_get", [sz], vp),
            ("ggml_backend_reg_name", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_get_props", [vp, ctypes.POINTER(_DevProps)], None),
            ("ggml_backend_dev_buffer_type", [vp], vp),
            ("ggml_backend_buft_get_alignment", [vp], sz),
            ("ggml_backend_dev_supports_op", [vp, vp], ctypes.c_bool),
            ("ggml_init", [_InitParams], vp),
            ("ggml_free", [vp], None),
            ("ggml_new_tensor_2d", [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], vp),
            ("ggml_mul_mat", [vp, vp, vp], vp),
        ):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        _protos_ready = True
    return lib


def _ensure_backend() -> None:
    ensure_backend()  # one initialisation and one log callback for the whole process


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", errors="replace") if raw else ""


def list_devices() -> list[Device]:
    """Every device llama.cpp can use, with its free and total memory in bytes."""
    with _lock:
        _ensure_backend()
        lib = _lib()
        out = []
        for i in range(lib.ggml_backend_dev_count()):
            dev = lib.ggml_backend_dev_get(i)
            props = _DevProps()
            lib.ggml_backend_dev_get_props(dev, ctypes.byref(props))
            kind = _DEV_TYPES.get(props.type, "accel")
            buft = lib.ggml_backend_dev_buffer_type(dev) if kind in ("gpu", "igpu") else None
            out.append(
                Device(
                    _text(props.name),
                    _text(props.description),
                    kind,
                    props.memory_free,
                    props.memory_total,
                    _text(props.device_id) or None,
                    bool(props.caps.buffer_from_host_ptr),
                    lib.ggml_backend_buft_get_alignment(buft) if buft else 0,
                    _max_tensor_bytes(lib, dev) if _text(props.name).startswith("Vulkan") else 0,
                )
            )
        return out


_PROBE_ROW = 4096  # bytes per row of the probe matrix (1024 f32)
_max_tensor_cache: dict[str, int] = {}


def _max_tensor_bytes(lib: ctypes.CDLL, dev: int) -> int:
    """The largest weight matrix the device accepts for a matrix multiply, to 4 KiB.

    Vulkan refuses tensors beyond the device's maxStorageBufferRange (128 MiB on some drivers, 4 GiB
    on most desktop GPUs) and llama.cpp then keeps such a weight, often the output matrix, on the
    CPU. The limit is not exposed, so the backend's own supports_op answers for probe tensors that
    are described, never allocated (a no_alloc ggml context).
    """
    name = _text(lib.ggml_backend_dev_name(dev))
    if name in _max_tensor_cache:
        return _max_tensor_cache[name]
    ctx = lib.ggml_init(_InitParams(1 << 16, None, True))
    if not ctx:
        return 0

    def ok(rows: int) -> bool:
        w = lib.ggml_new_tensor_2d(ctx, 0, _PROBE_ROW // 4, rows)
        x = lib.ggml_new_tensor_2d(ctx, 0, _PROBE_ROW // 4, 1)
        return bool(lib.ggml_backend_dev_supports_op(dev, lib.ggml_mul_mat(ctx, w, x)))

    try:
        lo, hi = 1, 1 << 22  # 4 KiB .. 16 GiB
        if ok(hi):
            limit = 0  # nothing a weight needs is refused
        elif not ok(lo):
            limit = 0  # matrix multiplies are not offered at all: not a size limit
        else:
            for _ in range(24):  # a probe context holds 3 tensors per try: well inside 64 KiB
                if hi - lo <= 1:
                    break
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if ok(mid) else (lo, mid)
            limit = lo * _PROBE_ROW
    finally:
        lib.ggml_free(ctx)
    _max_tensor_cache[name] = limit
    return limit


def backends() -> list[str]:
    with _lock:
        _ensure_backend()
        lib = _lib()
        return [
            _text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(lib.ggml_backend_reg_count())
        ]


def capabilities() -> Capabilities:
    _ensure_backend()
    info = _text(llama_cpp.llama_print_system_info())
    features = frozenset(m.group(1) for m in re.finditer(r"(\w+) = 1", info))
    registered = tuple(backends())
    return Capabilities(
        supports_gpu_offload(), registered, features, info.strip(), loaded_backends(), unused_gpu(registered)
    )


def build_spec(devices: Iterable[Device] | None = None, caps: Capabilities | None = None) -> BuildSpec:
    """Describe this llama.cpp build for `app.memory.predict`: its GPUs and its repack kernels."""
    devices = list_devices() if devices is None else list(devices)
    caps = capabilities() if caps is None else caps
    gpus = tuple(
        GpuSpec(d.name, d.free_bytes, d.maps_host, d.alignment, d.max_tensor_bytes)
        for d in devices
        if d.type in ("gpu", "igpu")
    )
    runtime = "cpu"
    for name in caps.backends:
        low = name.lower()
        for key in ("cuda", "hip", "rocm", "metal", "vulkan", "sycl"):
            if key in low and gpus:
                runtime = "hip" if key == "rocm" else key
    feats = caps.cpu_features
    if "REPACK" in feats or not feats:
        repack = (
            REPACK_ARM_I8MM
            if "MATMUL_INT8" in feats
            else REPACK_X86
            if "AVX2" in feats or not feats
            else frozenset()
        )
    else:
        repack = frozenset()
    note = caps.unused_gpu.message() if caps.unused_gpu is not None and not gpus else ""
    return BuildSpec(gpus=gpus, runtime=runtime, repack_types=repack, gpu_note=note)


@contextmanager
def capture_llama_logs() -> Iterator[list[str]]:
    """Collect llama.cpp's log lines (complete lines, without the newline) while the block runs.

    Rides on the backend's one log callback (`add_log_sink`), so other listeners keep theirs.
    """
    _ensure_backend()
    lines: list[str] = []
    pending = [""]

    def _sink(_level: int, text: str) -> None:
        pending[0] += text
        while "\n" in pending[0]:
            line, pending[0] = pending[0].split("\n", 1)
            lines.append(line)

    add_log_sink(_sink)
    try:
        yield lines
    finally:
        remove_log_sink(_sink)
        if pending[0]:
            lines.append(pending[0])


_BUFFER_LINE = re.compile(
    r"^\s*~?(?P<func>\w+):\s+(?P<buf>\S+)\s+(?P<kind>model|KV|output|compute)"
    r" buffer size =\s*(?P<mib>[\d.]+) MiB"
)


def _device_of(buffer_name: str) -> str:
    name = buffer_name.removesuffix("_Mapped").removesuffix("_REPACK").split("[", 1)[0]  # RPC0[host:port]
    if name.upper().startswith("CPU") or name.endswith("_Host"):
        return "CPU"
    return name


def parse_buffer_report(lines: Iterable[str], role: str | None = None) -> list[MeasuredBuffer]:
    """Buffers from llama.cpp lines such as `load_tensors:   CPU_REPACK model buffer size =   596.53 MiB`.

    Sizes are printed in MiB with two decimals, so each is exact to +-5 KiB.
    """
    out = []
    for line in lines:
        m = _BUFFER_LINE.match(line)
        if not m:
            continue
        buf, kind = m.group("buf"), m.group("kind")
        k = {"model": "model", "KV": "kv", "output": "output", "compute": "compute"}[kind]
        if k == "model" and buf.endswith("_REPACK"):
            k = "repack"
        out.append(MeasuredBuffer(k, _device_of(buf), round(float(m.group("mib")) * 1024 * 1024), buf, role))  # type: ignore[arg-type]
    return out


def measure_model(
    path: str | Path,
    *,
    n_ctx: int = 4096,
    n_gpu_layers: int = 0,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
    n_batch: int = 512,
    n_ubatch: int = 512,
    n_outputs_max: int = 0,
    use_mmap: bool = True,
    n_threads: int = 2,
    role: str | None = None,
) -> list[MeasuredBuffer]:
    """Load `path` and one context as llama.cpp would for the app, return its buffer report, free both."""
    settings = ModelSettings(
        n_gpu_layers=n_gpu_layers, n_ctx=n_ctx, type_k=type_k, type_v=type_v, flash_attn=flash_attn,
        n_batch=n_batch, n_ubatch=n_ubatch, n_outputs_max=n_outputs_max, use_mmap=use_mmap,
    )  # fmt: skip
    lines, process = _load_and_free(Path(path), settings, n_threads, dry_run=False)
    buffers = [b for b in parse_buffer_report(lines, role) if b.label]
    # NVML sees what the process holds on each GPU; llama.cpp's own buffers aside, that is the runtime.
    for dev, used in process.items():
        ours = sum(b.bytes for b in buffers if b.device == dev)
        buffers.append(MeasuredBuffer("overhead", dev, max(used - ours, 0), "NVML: process less buffers", role))
    return buffers


_dry_cache: dict[tuple, tuple[Buffer, ...]] = {}


def dry_run_compute(path: str | Path, settings: ModelSettings) -> tuple[Buffer, ...]:
    """llama.cpp's own figures for the compute buffers, from its allocation dry run.

    `no_alloc` loads the metadata and builds and plans the worst-case graph exactly as a real load
    would, for every backend, but allocates nothing and reads no weights (0.1-0.3 s). Where the
    graph is split between a GPU and the CPU, ggml-alloc's layout is not captured by a closed form
    (docs/MEMORY.md); this is its real answer. Raises MeasureError where llama.cpp refuses.
    """
    path = Path(path)
    st = path.stat()
    key = (str(path), st.st_mtime_ns, settings)
    if key not in _dry_cache:
        lines, _ = _load_and_free(path, settings, n_threads=1, dry_run=True)
        found = [b for b in parse_buffer_report(lines) if b.kind == "compute"]
        if not found:
            raise MeasureError(f"llama.cpp's dry run of {path.name} reported no compute buffer")
        _dry_cache[key] = tuple(
            Buffer("compute", b.device, b.bytes, b.label) for b in found
        )
    return _dry_cache[key]


def _load_and_free(
    path: Path, s: ModelSettings, n_threads: int, dry_run: bool
) -> tuple[list[str], dict[str, int]]:
    """Create the model and one context as the app would (or only simulate it), return the log lines
    and, for a real load, this process's GPU use by NVML while both were alive."""
    if not path.is_file():
        raise MeasureError(f"{path}: no such model file")
    for value in (s.type_k, s.type_v):
        if value not in _GGML_TYPES:
            raise MeasureError(f"unknown KV cache type {value!r}; use one of {', '.join(_GGML_TYPES)}")
    process: dict[str, int] = {}
    with capture_llama_logs() as lines:
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = s.n_gpu_layers if s.n_gpu_layers >= 0 else 999
        if s.devices is not None:
            device_list = device_array(s.devices)  # alive until the model is freed below
            mparams.devices = ctypes.cast(device_list, ctypes.c_void_p)
        if dry_run:
            mparams.no_alloc = True  # metadata only; every allocation is simulated
            mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE  # no_alloc maps nothing (mmap aborts)
        elif not s.use_mmap:
            mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), mparams)
        if not model:
            raise MeasureError(f"llama.cpp could not load {path}: " + _last_error(lines))
        try:
            cparams = llama_cpp.llama_context_default_params()
            cparams.n_ctx, cparams.n_batch = s.n_ctx, s.n_batch
            cparams.n_ubatch = min(s.n_ubatch, s.n_batch)
            cparams.n_seq_max, cparams.n_outputs_max = s.n_seq_max, s.n_outputs_max
            cparams.n_threads = cparams.n_threads_batch = n_threads
            cparams.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if s.flash_attn
                else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
            cparams.type_k, cparams.type_v = _GGML_TYPES[s.type_k], _GGML_TYPES[s.type_v]
            cparams.offload_kqv, cparams.op_offload = s.offload_kqv, s.op_offload
            cparams.no_perf = True
            ctx = llama_cpp.llama_init_from_model(model, cparams)
            if not ctx:
                raise MeasureError(
                    f"llama.cpp could not create a {s.n_ctx}-token context for {path.name}: "
                    + _last_error(lines)
                )
            if not dry_run:
                process = _process_use()  # while the model and its context are alive
            llama_cpp.llama_free(ctx)
        finally:
            llama_cpp.llama_model_free(model)
    return lines, process


def _process_use() -> dict[str, int]:
    from app.memory.nvml_usage import process_use_by_device

    return process_use_by_device(list_devices())


def _last_error(lines: list[str]) -> str:
    errors = [ln.strip() for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return errors[-1] if errors else "see the log above; the file may be corrupt or too new for this build"

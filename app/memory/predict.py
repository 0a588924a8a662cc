"""Predict what llama.cpp allocates for one model, per buffer and per device, before loading it.

Every rule below is read from the vendored llama.cpp of llama-cpp-python 0.3.36 and checked against
its own buffer report (see docs/MEMORY.md and tests/test_memory.py):

* Layers: `i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)`; repeating layer `il` and the output
  layer (`il = n_layer`) go to a GPU when `il >= i_gpu_start`, so the output layer is offloaded
  first. The input layer (token embeddings) always stays on the CPU. Layers are spread over several
  GPUs in proportion to their free memory (llama-model.cpp, `load_tensors`).
* CPU weights are an mmap of the file: the `CPU_Mapped` buffer spans the first to the last byte of
  the CPU-resident tensors. A CPU-only build also repacks the matrices of types its kernels
  interleave (Q4_0, Q4_K, IQ4_NL, MXFP4 on AVX2; more on Arm) into a `CPU_REPACK` copy. A GPU build
  picks the GPU's host buffer type first for CPU layers and, with mmap, falls back to the plain CPU
  buffer: no repack there.
* Tied embeddings: the output layer reuses `token_embd`; where the output layer's buffer type differs
  from the input's (GPU, or CPU_REPACK) the matrix is duplicated there.
* GPU weights: each backend's `get_alloc_size`, aligned to its buffer type: CUDA, HIP and SYCL pad
  quantised rows to 512 values and align to 128 bytes; Vulkan takes the bytes as they are, aligned to
  the device's minStorageBufferOffsetAlignment; Metal with mmap maps the file's byte range of its
  tensors (`MTL0_Mapped`, like `CPU_Mapped`) instead of copying.
* KV cache: `n_ctx` rounded up to 256 cells x layers x (K + V row bytes of the cache type), each
  layer's cache on its layer's device.
* Output buffer: `max(n_outputs, n_seq_max) x n_vocab x 4` bytes in host memory (llama.cpp reserves
  one row at load time and grows it to the largest logits request).
* Compute buffer: the peak of ggml-alloc's worst-case graph (a ubatch of `min(n_ctx, n_ubatch)`
  tokens), the largest of three phases (see `_compute_phases`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from app.memory.shape import PredictionError, Shape, ShapeTensor
from app.models.cache_kind import StateLayout, state_layout
from app.models.gguf_meta import GGUFInfo, TensorInfo, nextn_layers

MiB = 1024 * 1024
GiB = 1024 * MiB

BufferKind = Literal["model", "repack", "kv", "output", "compute", "overhead"]
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
# CPU types the repack kernels interleave on x86 with AVX2 (ggml-cpu/repack.cpp, rows % 8 == 0).
REPACK_X86 = frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"})
REPACK_ARM_I8MM = frozenset({"Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0"})
_TENSOR_ALIGN_CPU = 32
# Tensor alignment of each runtime's device buffer type (Vulkan's is the device's
# minStorageBufferOffsetAlignment, read from the device when known; 64 covers common GPUs).
_GPU_ALIGN = {"cuda": 128, "hip": 128, "sycl": 128, "metal": 32, "vulkan": 64}
# CUDA, HIP and SYCL pad quantised rows to a multiple of 512 values (MATRIX_ROW_PADDING).
_ROW_PADDED = frozenset({"cuda", "hip", "sycl"})
_GPU_ROW_PAD = 512
_KV_PAD = 256
# Device memory a GPU runtime takes per process beyond llama.cpp's buffers (context, cuBLAS/hipBLAS
# workspaces, kernels), shared by target and draft (they live in one process). CUDA's is measured: NVML's
# process total less llama.cpp's CUDA buffers was 519-524 MiB in all 30 loads of the GPU check (H200, driver
# 580, CUDA 13.0, docs/GPU.md); 400 MiB had left totals 2-18% short. The others are estimates.
RUNTIME_OVERHEAD = {
    "cuda": 524 * MiB,
    "hip": 400 * MiB,
    "sycl": 300 * MiB,
    "vulkan": 150 * MiB,
    "metal": 0,
    "cpu": 0,
}


@dataclass(frozen=True)
class GpuSpec:
    name: str  # llama.cpp device name, e.g. "CUDA0"
    free_bytes: int  # used to split layers between several GPUs, as llama.cpp does
    maps_host: bool = False  # weights mapped from the mmapped file, not copied (Metal)
    alignment: int = 0  # the device buffer type's alignment; 0: the runtime's usual one
    max_tensor_bytes: int = 0  # a larger weight stays on the CPU (Vulkan's maxStorageBufferRange); 0: none


@dataclass(frozen=True)
class BuildSpec:
    """What the llama.cpp build does with memory: its GPUs and its CPU repack kernels."""

    gpus: tuple[GpuSpec, ...] = ()
    runtime: str = "cpu"  # "cuda", "hip", "metal", "vulkan", "sycl" or "cpu"
    repack_types: frozenset[str] = REPACK_X86
    gpu_note: str = ""  # with no GPU device: the machine's GPU this build cannot use, and the fix

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)


@dataclass(frozen=True)
class ModelSettings:
    n_gpu_layers: int = 0  # llama.cpp's -ngl; negative means all layers (n_layer + 1)
    n_ctx: int = 4096  # 0: the model's training context
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True  # llama.cpp's "auto" resolves to on for CPU, CUDA, Metal and Vulkan
    n_batch: int = 512
    n_ubatch: int = 512
    n_outputs_max: int = 0  # 0: n_batch (llama.cpp's default), the logits rows of the worst-case graph
    n_outputs: int = 1  # largest logits request at run time (K + 1 when verifying K draft tokens)
    n_seq_max: int = 1
    use_mmap: bool = True
    offload_kqv: bool = True
    op_offload: bool = True  # GPU builds: large batches of CPU-resident matrices run on the GPU
    devices: tuple[str, ...] | None = None  # the devices llama.cpp may offload to (None: every GPU device)


@dataclass(frozen=True)
class Buffer:
    kind: BufferKind
    device: str  # "CPU" or a GPU name
    bytes: int
    label: str  # llama.cpp's buffer name where it has one, e.g. "CPU_REPACK"


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts each layer for a given n_gpu_layers."""

    n_layer: int
    n_gpu_layers: int
    i_gpu_start: int
    layer_device: tuple[str, ...]  # per repeating layer
    output_device: str

    @property
    def gpu_repeating_layers(self) -> int:
        return sum(d != "CPU" for d in self.layer_device)

    @property
    def output_on_gpu(self) -> bool:
        return self.output_device != "CPU"


@dataclass(frozen=True)
class ModelPrediction:
    role: str
    path: str
    n_layer: int
    n_ctx: int  # after llama.cpp's rounding
    placement: Placement
    buffers: tuple[Buffer, ...]
    notes: tuple[str, ...] = field(default=())

    def _sum(self, *kinds: str, device: str | None = None) -> int:
        return sum(
            b.bytes for b in self.buffers if b.kind in kinds and (device is None or b.device == device)
        )

    @property
    def weights_bytes(self) -> int:
        return self._sum("model", "repack")

    @property
    def kv_bytes(self) -> int:
        return self._sum("kv")

    @property
    def compute_bytes(self) -> int:
        return self._sum("compute")

    @property
    def output_bytes(self) -> int:
        return self._sum("output")

    @property
    def total_bytes(self) -> int:
        return sum(b.bytes for b in self.buffers)

    def device_bytes(self, device: str) -> int:
        return sum(b.bytes for b in self.buffers if b.device == device)

    def devices(self) -> list[str]:
        return sorted({b.device for b in self.buffers}, key=lambda d: (d != "CPU", d))


def placement(n_layer: int, n_gpu_layers: int, gpus: Sequence[GpuSpec] = ()) -> Placement:
    """llama.cpp's layer assignment: the output layer is offloaded first, the input layer never."""
    if n_layer <= 0:
        raise PredictionError(f"a model needs at least one layer, not {n_layer}")
    ngl = n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1) if gpus else 0
    splits = _split_points(gpus)

    def device(il: int) -> str:
        if il < i_gpu_start or il - i_gpu_start >= act:
            return "CPU"
        frac = (il - i_gpu_start) / act
        index = next((i for i, s in enumerate(splits) if frac < s), len(splits) - 1)
        return gpus[index].name

    return Placement(n_layer, ngl, i_gpu_start, tuple(device(il) for il in range(n_layer)), device(n_layer))


def _split_points(gpus: Sequence[GpuSpec]) -> list[float]:
    weights = [max(g.free_bytes, 0) for g in gpus]
    total = sum(weights)
    if total <= 0:
        weights, total = [1] * len(gpus), max(len(gpus), 1)
    points, acc = [], 0
    for w in weights:
        acc += w
        points.append(acc / total)
    return points


def kv_row_bytes(cache_type: str, n_elements: int) -> int:
    try:
        qtype = GGMLQuantizationType[cache_type.upper()]
    except KeyError:
        raise PredictionError(
            f"unknown KV cache type {cache_type!r}; use one of {', '.join(KV_TYPES)}"
        ) from None
    block, size = GGML_QUANT_SIZES[qtype]
    if n_elements % block:
        raise PredictionError(
            f"KV cache type {cache_type} needs rows that are a multiple of {block} values, "
            f"this model's are {n_elements}; use f16 or q8_0"
        )
    return n_elements // block * size


def predict_model(
    info: GGUFInfo, settings: ModelSettings, build: BuildSpec = BuildSpec(), role: str = "model"
) -> ModelPrediction:
    """Every buffer llama.cpp will allocate for this model with these settings on this build."""
    shape = Shape.from_info(info)
    _check_settings(settings)
    place = placement(shape.n_layer, settings.n_gpu_layers, build.gpus)
    n_ctx_req = settings.n_ctx or shape.n_ctx_train
    n_ctx = _pad(n_ctx_req, _KV_PAD)
    buffers: list[Buffer] = []
    notes: list[str] = []
    buffers += _weight_buffers(shape, place, settings, build)

    # KV cache: one K and one V row of n_ctx cells per layer, on the layer's device.
    k_row = kv_row_bytes(settings.type_k, shape.n_embd_k_gqa)
    v_row = kv_row_bytes(settings.type_v, shape.n_embd_v_gqa)
    kv_per_layer = (k_row + v_row) * n_ctx  # n_ctx cells in all, however many sequences share them
    # Recurrent and hybrid models: a KV cache in the attention layers only, and a recurrent state (with its
    # rollback snapshots) in the others, per sequence; counted with the cache, on the layer's device.
    layout = state_layout(info)
    if len(layout.attention) != len(place.layer_device):
        layout = StateLayout((True,) * len(place.layer_device), (False,) * len(place.layer_device), 0, 0)
    state_per_layer = layout.state_floats * 4 * (1 + layout.snapshots) * max(settings.n_seq_max, 1)
    kv: dict[str, int] = {}
    state: dict[str, int] = {}
    for il, dev in enumerate(place.layer_device):
        dev = dev if settings.offload_kqv else "CPU"
        if layout.attention[il]:
            kv[dev] = kv.get(dev, 0) + kv_per_layer
        if layout.recurrent[il]:
            state[dev] = state.get(dev, 0) + state_per_layer
    buffers += [Buffer("kv", d, b, f"{d} KV") for d, b in kv.items()]
    buffers += [Buffer("kv", d, b, f"{d} recurrent state") for d, b in state.items()]
    # A model with MTP (NextN) layers loads them too, and mode mtp opens a context of its own for them: their KV
    # cache, the target's size, beside the last layer.
    if nextn_layers(info) and place.layer_device:
        dev = place.layer_device[-1] if settings.offload_kqv else "CPU"
        buffers.append(Buffer("kv", dev, kv_per_layer * nextn_layers(info), f"{dev} KV (MTP head)"))

    n_out = max(settings.n_outputs, settings.n_seq_max, 1)
    buffers.append(Buffer("output", "CPU", n_out * shape.n_vocab * 4, "output (logits)"))

    if not build.has_gpu:
        peak = _cpu_peak(_compute_phases(shape, settings, n_ctx_req, n_ctx))
        buffers.append(Buffer("compute", "CPU", peak, "CPU compute"))
    else:
        buffers += _gpu_compute(shape, place, settings, build, n_ctx_req, n_ctx)
        if build.runtime != "vulkan":
            name = build.runtime.upper() if build.runtime != "metal" else "Metal"
            notes.append(f"{name} weight rules are read from llama.cpp's source, not yet measured on such a GPU")
            notes.append(
                f"{name} compute buffers follow the rules measured on llama.cpp's Vulkan backend"
            )
    return ModelPrediction(role, str(info.path), shape.n_layer, n_ctx, place, tuple(buffers), tuple(notes))


def _gpu_compute(
    shape: Shape, place: Placement, s: ModelSettings, build: BuildSpec, n_ctx_req: int, n_ctx: int
) -> list[Buffer]:
    """Compute buffers of a GPU build (rules measured on llama.cpp's Vulkan backend, docs/MEMORY.md).

    The GPU holds the worst-case graph of its layers; the logits phase only where the output matrix
    multiply runs there. With op_offload, large batches of CPU-resident matrices run on the GPU too,
    and it holds copies of two of them at once. The host keeps the graph inputs (2E and the KQ
    mask), or the logits when the output matrix stays on the CPU.
    """
    phases = _compute_phases(shape, s, n_ctx_req, n_ctx)
    gpu0 = build.gpus[0]
    out_weight = _output_weight(shape)
    out_dev = _weight_device(out_weight, shape, place, build) if out_weight else place.output_device
    logits_on_gpu = out_dev != "CPU"
    cpu_mats = [
        t.info for t in shape.tensors if t.is_matmul and _weight_device(t, shape, place, build) == "CPU"
    ]
    if out_weight is not None and shape.tied and not logits_on_gpu:
        cpu_mats.append(out_weight.info)  # the output multiply reads token_embd on the CPU
    # Only matrices the GPU accepts are copied there (an oversized one runs on the CPU).
    copies = sorted(
        (_gpu_alloc(t, build, gpu0) for t in cpu_mats if _fits(t, build, gpu0)), reverse=True
    )
    on_gpu = logits_on_gpu or place.gpu_repeating_layers > 0
    offloads = s.op_offload and bool(copies)
    if not on_gpu and not offloads:
        return [Buffer("compute", "CPU", _cpu_peak(phases), "CPU compute")]
    # The logits are computed on the GPU where the output multiply runs there or is offloaded there.
    out_copied = offloads and out_weight is not None and _fits(out_weight.info, build, gpu0)
    logits_gpu = logits_on_gpu or out_copied
    scores_on_cpu = bool(gpu0.max_tensor_bytes) and phases["scores_tensor"] > gpu0.max_tensor_bytes
    if scores_on_cpu:
        attention, ffn = phases["attention_gpu_no_scores"], phases["ffn_gpu_no_mask"]
    else:
        attention, ffn = phases["attention_gpu"], phases["ffn_gpu"]
    gpu_peak = max(attention, ffn, phases["logits_gpu"] if logits_gpu else 0)
    if offloads:
        gpu_peak += sum(copies[:2])
    gpu = out_dev if logits_on_gpu else gpu0.name
    host = phases["inputs"] if logits_gpu else max(phases["inputs"], phases["logits_gpu"])
    if scores_on_cpu:
        host = max(host, phases["attention"])
    return [Buffer("compute", gpu, gpu_peak, f"{gpu} compute"), Buffer("compute", "CPU", host, "CPU host compute")]


def _output_weight(shape: Shape) -> ShapeTensor | None:
    """The output projection: output.weight, or token_embd where the embeddings are tied."""
    for t in shape.tensors:
        if t.layer == shape.n_layer and t.is_matmul:
            return t
    if shape.token_embd is None:
        return None
    return ShapeTensor(shape.token_embd, shape.n_layer, True)


def _fits(t: TensorInfo, build: BuildSpec, gpu: GpuSpec) -> bool:
    return not gpu.max_tensor_bytes or _gpu_alloc(t, build, gpu) <= gpu.max_tensor_bytes


def _weight_device(t: ShapeTensor, shape: Shape, place: Placement, build: BuildSpec) -> str:
    """Where a weight really lives: its layer's device, unless that GPU cannot take a tensor this large."""
    dev = _tensor_device(t, shape, place)
    if dev == "CPU":
        return dev
    spec = next(g for g in build.gpus if g.name == dev)
    return dev if _fits(t.info, build, spec) else "CPU"


def _check_settings(s: ModelSettings) -> None:
    for name in ("n_ctx", "n_outputs_max", "n_outputs"):
        if getattr(s, name) < 0:
            raise PredictionError(f"{name} must not be negative (got {getattr(s, name)})")
    for name in ("n_batch", "n_ubatch", "n_seq_max"):
        if getattr(s, name) < 1:
            raise PredictionError(f"{name} must be at least 1 (got {getattr(s, name)})")
    if s.n_ctx > 1 << 24:
        raise PredictionError(f"context {s.n_ctx:,} is beyond anything llama.cpp can allocate")


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def _n_tokens(s: ModelSettings, n_ctx_req: int, n_ctx: int) -> int:
    n_batch = min(n_ctx_req, s.n_batch)  # llama.cpp clamps the batch before padding the context
    return min(n_ctx, min(n_batch, s.n_ubatch))


def _cpu_peak(phases: dict[str, int]) -> int:
    """The peak of a graph that runs wholly on the CPU (the GPU-build phases are not part of it)."""
    return max(phases["attention"], phases["ffn"], phases["logits"])


def _compute_phases(shape: Shape, s: ModelSettings, n_ctx_req: int, n_ctx: int) -> dict[str, int]:
    """Peak live bytes of the worst-case graph in its three phases (fitted to ggml-alloc's layout).

    E, F, G: one ubatch of hidden states, FFN activations and K (or V) projections, in f32. The
    KQ mask (f16 with flash attention, else f32) lives through every layer. Without flash attention
    the n_kv x n_tokens x n_head score matrix dominates at long contexts. The last phase holds the
    logits of `n_outputs_max` rows; it carries one more E of fragmentation unless flash attention
    runs on an f16 cache.
    """
    n_tok = _n_tokens(s, n_ctx_req, n_ctx)
    n_out = min(n_tok, s.n_outputs_max or min(n_ctx_req, s.n_batch))
    e, f = shape.n_embd * n_tok * 4, shape.n_ff * n_tok * 4
    g = (shape.n_embd_k_gqa + shape.n_embd_v_gqa) * n_tok * 4
    mask = n_ctx * n_tok * (2 if s.flash_attn else 4)
    scores = 0 if s.flash_attn else n_ctx * n_tok * shape.n_head * 4
    frag = 0 if s.flash_attn and s.type_k == s.type_v == "f16" else e
    small = 4 * n_tok * 4
    return {
        "attention": mask + scores + 5 * e + g + small,
        "ffn": mask + 3 * f + 4 * e + small,
        "logits": (shape.n_vocab + 2 * shape.n_embd) * n_out * 4 + frag + small,
        # GPU builds (measured on Vulkan): attention holds two fewer hidden states without flash
        # attention, the FFN phase two fewer always; the host keeps only the graph inputs (two hidden
        # states, the KQ mask, and without flash attention the K and V projections).
        "attention_gpu": mask + scores + (3 * e if scores else 5 * e) + g + small,
        "ffn_gpu": mask + 3 * f + 2 * e + (g if scores else 0) + small,
        "inputs": 2 * e + mask + (g if scores else 0) + small,
        "logits_gpu": (shape.n_vocab + 2 * shape.n_embd) * n_out * 4 + small,  # no fragmentation seen
        # Where the score matrix is too large for the GPU (Vulkan's tensor limit), attention and its
        # mask stay on the CPU and the GPU keeps the projections and the FFN.
        "attention_gpu_no_scores": 3 * e + g + small,
        "ffn_gpu_no_mask": 3 * f + 2 * e + (g if scores else 0) + small,
        "scores_tensor": scores,
    }


def _tensor_device(t: ShapeTensor, shape: Shape, place: Placement) -> str:
    if t.layer < 0:
        return "CPU"
    if t.layer == shape.n_layer:
        return place.output_device
    return place.layer_device[t.layer]


def _repackable(t: TensorInfo, build: BuildSpec) -> bool:
    return t.type in build.repack_types and len(t.shape) >= 2 and t.shape[1] % 8 == 0


def _gpu_alloc(t: TensorInfo, build: BuildSpec, gpu: GpuSpec) -> int:
    """Bytes one weight takes in a GPU buffer: the backend's get_alloc_size, aligned."""
    size = t.n_bytes
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[t.type]]
    if build.runtime in _ROW_PADDED and block > 1 and t.shape[0] % _GPU_ROW_PAD:
        size += (_GPU_ROW_PAD - t.shape[0] % _GPU_ROW_PAD) // block * type_size
    return _pad(size, gpu.alignment or _GPU_ALIGN.get(build.runtime, 128))


def _weight_buffers(shape: Shape, place: Placement, s: ModelSettings, build: BuildSpec) -> list[Buffer]:
    cpu_plain: list[TensorInfo] = []
    repack = 0
    gpu: dict[str, int] = {}
    gpu_mapped: dict[str, list[TensorInfo]] = {}  # Metal with mmap: a view of the file's range
    specs = {g.name: g for g in build.gpus}
    for t in shape.tensors:
        dev = _weight_device(t, shape, place, build)
        if dev != "CPU" and specs[dev].maps_host and s.use_mmap:
            gpu_mapped.setdefault(dev, []).append(t.info)
        elif dev != "CPU":
            gpu[dev] = gpu.get(dev, 0) + _gpu_alloc(t.info, build, specs[dev])
        elif not build.has_gpu and t.is_matmul and _repackable(t.info, build):
            repack += _pad(t.info.n_bytes, _TENSOR_ALIGN_CPU)
        else:
            cpu_plain.append(t.info)
    emb = shape.token_embd
    if shape.tied and emb is not None:
        # The output layer multiplies by token_embd: a copy wherever its buffer type differs.
        out_dev = _weight_device(ShapeTensor(emb, shape.n_layer, True), shape, place, build)
        if out_dev != "CPU" and specs[out_dev].maps_host and s.use_mmap:
            # The duplicated output tensor points at token_embd's bytes: the mapped range reaches them.
            gpu_mapped.setdefault(out_dev, []).append(emb)
        elif out_dev != "CPU":
            gpu[out_dev] = gpu.get(out_dev, 0) + _gpu_alloc(emb, build, specs[out_dev])
        elif not build.has_gpu and _repackable(emb, build):
            repack += _pad(emb.n_bytes, _TENSOR_ALIGN_CPU)
    out: list[Buffer] = []
    if cpu_plain:
        if s.use_mmap:
            out.append(Buffer("model", "CPU", _span(cpu_plain), "CPU_Mapped"))
        else:
            out.append(
                Buffer("model", "CPU", sum(_pad(t.n_bytes, _TENSOR_ALIGN_CPU) for t in cpu_plain), "CPU")
            )
    if repack:
        out.append(Buffer("repack", "CPU", repack, "CPU_REPACK"))
    out += [Buffer("model", d, b, d) for d, b in gpu.items()]
    out += [Buffer("model", d, _span(ts), f"{d}_Mapped") for d, ts in gpu_mapped.items()]
    return out


def _span(tensors: Sequence[TensorInfo]) -> int:
    """Bytes from the first to the last byte of these tensors in the file (llama.cpp's mapping range)."""
    return max(t.offset + t.n_bytes for t in tensors) - min(t.offset for t in tensors)

"""The one module that imports `llama_cpp`: models, contexts, batches, logits, tokenizer, logs.

Everything here runs on the thread that owns the llama contexts (see `ui/base/worker.py`); none of it is
thread-safe. ctypes releases the GIL inside `llama_decode`, so other Python threads keep running.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import llama_cpp
import numpy as np

from app.llama_backend import backend_modules
from app.models.cache_kind import SNAPSHOT_TOKENS

log = logging.getLogger(__name__)

LogSink = Callable[[int, str], None]

# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the previous line).
_LEVEL_TO_LOGGING = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_sinks: list[LogSink] = []
_sinks_lock = threading.Lock()
_last_level = 2
_backend_ready = False
_backend_lock = threading.Lock()  # the picker's device discovery and the worker's load may both be first
_loaded_backends: backend_modules.LoadedBackends | None = None


class LlamaError(RuntimeError):
    """A llama.cpp call failed; the message says which call, on which file, and what to try."""


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # GGML_LOG_LEVEL_CONT (5) continues the previous line at its level.
    global _last_level
    if level != 5:
        _last_level = level
    message = text.decode("utf-8", errors="replace")
    with _sinks_lock:
        sinks = list(_sinks)
    for sink in sinks:
        sink(_last_level, message)
    if _LEVEL_TO_LOGGING.get(_last_level, logging.INFO) >= logging.WARNING:
        log.warning("llama.cpp: %s", message.rstrip())


def add_log_sink(sink: LogSink) -> None:
    """Receive every llama.cpp log line as (ggml level, text); used to capture buffer reports."""
    with _sinks_lock:
        _sinks.append(sink)


def remove_log_sink(sink: LogSink) -> None:
    with _sinks_lock:
        if sink in _sinks:
            _sinks.remove(sink)


def ensure_backend() -> None:
    """Initialise llama.cpp once: its logs through Python logging (quiet by default), then its backends.

    A portable build (`GGML_BACKEND_DL`, what bootstrap and the packages build) starts with no backend
    at all: each is a module in llama_cpp/lib (one CPU module per x86 level, CUDA, Vulkan ...) that
    ggml picks by the CPU's features and loads here, before any model.
    """
    global _backend_ready, _loaded_backends
    with _backend_lock:
        if _backend_ready:
            return
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        atexit.register(detach_logs)
        _loaded_backends = backend_modules.load(lib_dir())
        llama_cpp.llama_backend_init()
        _backend_ready = True


def detach_logs() -> None:
    """llama.cpp logs to stderr again, not through Python (at exit).

    A daemon thread may still be inside llama.cpp when the interpreter shuts down (the picker's device discovery:
    Vulkan's start-up takes seconds). A log line then calls into Python, which ends the thread there with a forced
    unwind; inside a C++ `catch (...)` (ggml_backend_vk_reg has one) that aborts the process: "FATAL: exception
    not rethrown" at the exit of the Vulkan package's first start.
    """
    llama_cpp.llama_log_set(llama_cpp.llama_log_callback(), ctypes.c_void_p(0))  # a NULL callback: the default


def loaded_backends() -> backend_modules.LoadedBackends:
    """Which backend modules this process loaded (the CPU variant among them), and which failed."""
    ensure_backend()
    assert _loaded_backends is not None
    return _loaded_backends


def lib_dir() -> Path:
    """llama-cpp-python's library folder: libllama, libggml and the backend modules."""
    return Path(llama_cpp.__file__).resolve().parent / "lib"


def supports_gpu_offload() -> bool:
    """Whether this machine has a GPU device llama.cpp can offload to (CUDA, Metal, Vulkan ...).

    Not llama.cpp's llama_supports_gpu_offload(): that one also says yes for every build with the
    RPC backend (ours always has it), GPU or not, and "auto" would then pick GPU-only modes on a CPU.
    """
    ensure_backend()
    lib = ggml_devices()
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        name = (lib.ggml_backend_dev_name(dev) or b"").decode()
        if lib.ggml_backend_dev_type(dev) in (1, 2) and not is_rpc_device(name):  # GPU, integrated GPU
            return True
    return False


def is_rpc_device(name: str) -> bool:
    """llama.cpp names RPC devices RPC0, RPC1 ... in the order servers were added."""
    return name.startswith("RPC") and name[3:].isdigit()


_devices_lib: ctypes.CDLL | None = None


def ggml_devices() -> ctypes.CDLL:
    """llama_cpp._ggml's libggml with the device-registry prototypes set (llama-cpp-python binds none)."""
    global _devices_lib
    if _devices_lib is None:
        import llama_cpp._ggml as _ggml

        lib, vp, sz = _ggml.libggml, ctypes.c_void_p, ctypes.c_size_t
        for name, args, res in (
            ("ggml_backend_dev_count", [], sz),
            ("ggml_backend_dev_get", [sz], vp),
            ("ggml_backend_dev_name", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_type", [vp], ctypes.c_int),
            ("ggml_backend_dev_by_name", [ctypes.c_char_p], vp),
        ):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        _devices_lib = lib
    return _devices_lib


def system_info() -> str:
    ensure_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")


ALLOW_AMX_ENV = "SPECCHAT_ALLOW_AMX"


def amx_refusal(info: str, repack: bool, allowed: bool) -> str | None:
    """Why repacked weights must not load on this build, or None.

    A native x86 build on a CPU with AMX (Xeon Sapphire Rapids and later) puts the weights in
    llama.cpp's AMX buffer, whose matmul segfaulted on the first decode with Q4_K weights here and in
    llama.cpp issue 20824: the app would die with no message. Without repacking no AMX buffer is used.
    """
    if not repack or allowed or "AMX_INT8 = 1" not in info:
        return None
    return (
        "This llama-cpp-python was built with llama.cpp's AMX kernels (system info: AMX_INT8 = 1), which "
        "crash on the first decode on some Xeons (llama.cpp issue 20824). Rebuild it without them: "
        "`python3 bootstrap.py run` does (it adds -mno-amx-int8), or "
        "CMAKE_ARGS=\"-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8\" pip install "
        "--force-reinstall --no-cache-dir llama-cpp-python. Or run with --strict (no weight repacking, "
        f"slower), or set {ALLOW_AMX_ENV}=1 to try the AMX kernels anyway."
    )


@dataclass(frozen=True, slots=True)
class ModelConfig:
    path: Path
    n_gpu_layers: int = -1  # -1: all layers (llama.cpp keeps them on the CPU when no GPU backend exists)
    use_mmap: bool = True
    # CPU weight repacking (llama.cpp's extra buffer types, its default) speeds up prompt processing
    # and one-token decoding, but its kernels switch at 4 rows, so a verify batch and a one-token step
    # round differently and greedy speculation may part from plain decoding at a near-tie (detected
    # and reported with its margin). Off ("strict"), batches of up to 7 rows use the same kernels as
    # one-token decoding on the CPU backend.
    repack: bool = True
    # The llama.cpp devices (by name) this model's offloaded layers may use; None: llama.cpp's default,
    # every GPU device of the process, RPC servers' included. The draft gets the local ones only.
    devices: tuple[str, ...] | None = None
    load_mtp: bool = False  # load the model's MTP (NextN) layers too, for --mode mtp (app/llama_backend/mtp.py)


@dataclass(frozen=True, slots=True)
class ContextConfig:
    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0  # 0: one per physical core
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    # Most rows with logits in one batch. llama.cpp sizes the output and compute buffers for it
    # (n_batch by default): K + 1 rows is all speculation needs, and it saves ~230 MiB per model.
    # 48: a sure copy may run to 47 tokens on the CPU (draft_policy.SURE_COPY_LONG).
    n_outputs_max: int = 48
    # Sliding-window models: keep every position of the window layers (llama.cpp's default), so any cut back is
    # exact; False keeps only the window plus a batch (less memory), and a far cut back is then refused
    # (LlamaContext._window_kept) and the prompt processed again.
    swa_full: bool = True
    # Recurrent and hybrid models (Mamba, LFM2, Qwen3.5 ...): llama.cpp keeps the recurrent state after each of a
    # decode's last n_rs_seq tokens, so a rollback of up to that many tokens is a pointer move (its n_rs_seq;
    # architectures without these snapshots get 0). Each one is another copy of the recurrent state (Qwen3.6-27B:
    # ~160 MB), so they cover the drafts of the default K (6) and a little more, not long copies: a longer cut, or
    # one on an architecture without snapshots, restores a checkpoint and replays (LlamaContext.truncate).
    n_rs_seq: int = SNAPSHOT_TOKENS


_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}


def device_array(names: Sequence[str]) -> ctypes.Array[ctypes.c_void_p]:
    lib = ggml_devices()
    handles = []
    for name in names:
        dev = lib.ggml_backend_dev_by_name(name.encode())
        if not dev:
            raise LlamaError(f"llama.cpp has no device {name!r} in this process (an RPC server not connected?)")
        handles.append(dev)
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def default_threads() -> int:
    import psutil

    return max(1, psutil.cpu_count(logical=False) or 1)


class LlamaModel:
    """A loaded GGUF: weights, vocabulary and chat template."""

    def __init__(self, config: ModelConfig, progress: Callable[[float], bool] | None = None) -> None:
        ensure_backend()
        path = Path(config.path)
        if not path.is_file():
            raise LlamaError(f"Model file not found: {path}. Check the path or run `specchat models list`.")
        refusal = amx_refusal(system_info(), config.repack, os.environ.get(ALLOW_AMX_ENV) == "1")
        if refusal:
            raise LlamaError(refusal)
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = config.n_gpu_layers if config.n_gpu_layers >= 0 else 999
        params.use_extra_bufts = config.repack
        params.load_mtp = config.load_mtp
        if config.devices is not None:
            self._devices = device_array(config.devices)  # NULL-terminated; kept alive with the model
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if not config.use_mmap:
            params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
        # Keep the ctypes callback alive for the duration of the load.
        self._progress_cb = None
        if progress is not None:

            @llama_cpp.llama_progress_callback
            def _cb(value: float, _data: ctypes.c_void_p) -> bool:
                return bool(progress(value))

            self._progress_cb = _cb
            params.progress_callback = _cb
        self.path = path
        self.config = config
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not self._model:
            raise LlamaError(
                f"llama.cpp could not load {path}: the file is not a GGUF model it understands, is "
                "truncated, or needs a newer llama.cpp. Run `specchat check-pair` or re-download it."
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.n_swa = int(llama_cpp.llama_model_n_swa(self.handle))  # attention window; 0: full attention
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.n_layer = int(llama_cpp.llama_model_n_layer(self._model))
        # A recurrent state (Mamba, RWKV) or one beside a KV cache (hybrid: LFM2, Qwen3.5, Granite 4 H ...): no
        # entry per position, so a cut back needs LlamaContext's snapshots, checkpoints or a replay.
        self.hybrid = bool(llama_cpp.llama_model_is_hybrid(self._model))
        self.recurrent = self.hybrid or bool(llama_cpp.llama_model_is_recurrent(self._model))
        self.bos = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(self._vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for token in range(self.n_vocab):
            if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                self._eog[token] = True

    @property
    def one_token_kernels_may_apply(self) -> bool:
        """Could verify batches run one-token decoding's kernels here at all (strict mode)? Not with repacked CPU
        weights: 4-row groups run a gemm (ggml-cpu/repack.cpp) that rounds differently (logits apart by up to ~0.4
        on the demo pair), and smaller batches re-read the weights row by row. GPU and RPC kernels have their own
        switches, unmeasured. Where this is True, app/engine/one_token_bound.py measures which batches do."""
        remote = any(is_rpc_device(d) for d in self.config.devices or ())  # an RPC server's kernels
        return not (self.config.repack or (self.config.n_gpu_layers != 0 and (supports_gpu_offload() or remote)))

    @property
    def handle(self) -> llama_cpp.llama_model_p:
        return self._model

    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model))

    def n_params(self) -> int:
        return int(llama_cpp.llama_model_n_params(self._model))

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    def token_text(self, token: int) -> str:
        """The vocabulary's raw text for a token (what llama.cpp's pair check compares)."""
        raw = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def piece(self, token: int) -> bytes:
        """Bytes this token adds to the output (special tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        piece = buf.raw[: max(n, 0)]
        self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


def copy_sequence_state(ctx: llama_cpp.llama_context_p, whose: str) -> ctypes.Array[ctypes.c_uint8]:
    """llama.cpp's state of sequence 0 of `ctx` (its cache), copied to host memory; `whose` names it in errors."""
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    state = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, state, size, 0))
    if written != size:
        raise LlamaError(f"llama.cpp copied {written} of {size} bytes of {whose}")
    return state


def set_sequence_state(ctx: llama_cpp.llama_context_p, state: ctypes.Array[ctypes.c_uint8]) -> bool:
    """Put back what copy_sequence_state copied; whether llama.cpp read all of it."""
    return int(llama_cpp.llama_state_seq_set_data(ctx, state, len(state), 0)) == len(state)


@dataclass(frozen=True, slots=True)
class CacheSnapshot:
    """What a context's KV cache held: its tokens, llama.cpp's state of the sequence (a copy in host memory), and
    the kept logits that followed them. `LlamaContext.restore` puts it back exactly (the same bytes, so the next
    decode computes what it would have computed had the cache never been replaced)."""

    tokens: tuple[int, ...]
    state: ctypes.Array[ctypes.c_uint8] = field(repr=False)
    kept: tuple[int, np.ndarray] | None = field(default=None, repr=False)
    # The follower's own copy, taken with the cache's (an MTP head's pairs of these positions): restored with it,
    # the head drafts on from the same place. None where nothing followed the cache.
    follower: FollowerSnapshot | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        own = len(self.state) + (self.kept[1].nbytes if self.kept is not None else 0)
        return own + (self.follower.nbytes if self.follower is not None else 0)


class LlamaContext:
    """One sequence's KV cache on a model, with a reusable batch and logits access."""

    def __init__(self, model: LlamaModel, config: ContextConfig) -> None:
        self.model = model
        self.config = config
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = min(config.n_ubatch, config.n_batch)
        params.n_seq_max = 1
        params.n_outputs_max = min(config.n_outputs_max, config.n_batch)
        threads = config.n_threads or default_threads()
        params.n_threads = threads
        params.n_threads_batch = threads
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if config.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        for name, value in (("type_k", config.type_k), ("type_v", config.type_v)):
            if value not in _GGML_TYPES:
                raise LlamaError(f"Unknown KV cache type {value!r}; use one of {', '.join(_GGML_TYPES)}.")
            setattr(params, name, _GGML_TYPES[value])
        params.no_perf = True
        params.swa_full = config.swa_full
        params.n_rs_seq = config.n_rs_seq if model.recurrent else 0
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise LlamaError(
                f"llama.cpp could not create a context of {config.n_ctx} tokens for {model.path.name}: "
                "probably out of memory. Lower the context size (-c) or the GPU layers (-ngl)."
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []  # what the KV cache holds, position by position
        # The last decode's output rows (see logits): how many, and a view of llama.cpp's buffer, made once per
        # buffer address instead of per row (a ctypes view cost ~0.1 ms a row right after a decode).
        self._n_out = 0
        self._out_view: np.ndarray | None = None
        self._out_address = 0
        self._rows: np.ndarray | None = None
        # (n, a copy of the logits that followed tokens[:n]), kept by keep_last_logits until the cache is cut below n
        self._kept: tuple[int, np.ndarray] | None = None
        self.native_ms = 0.0  # time spent inside llama_decode, to tell engine overhead from model time
        # Recurrent state: the snapshots llama.cpp actually keeps (0 where the architecture has none), how many
        # tokens back the last decode's snapshots reach (0 once one was used: a rollback is single-use), the
        # checkpoint a longer cut restores, and how each cut was served ("snapshot", "checkpoint", "reprocess").
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(self._ctx)) if model.recurrent else 0
        self._reach = 0
        self._checkpoint: _Checkpoint | None = None
        self.cuts: dict[str, int] = {"snapshot": 0, "checkpoint": 0, "reprocess": 0}
        # Told of every decode and every cut (an MTP head pairs each position with this context's hidden state).
        self.follower: CacheFollower | None = None

    def decode(self, tokens: Sequence[int], logits_for: str = "last") -> None:
        """Append `tokens` at position n_past. `logits_for`: "last", "all" (one chunk only) or "none".

        Logits are requested only for the rows that are needed: the 152k-wide output layer is a
        large share of a small model's cost.
        """
        for _ in self.decode_batches(tokens, logits_for):
            pass

    def decode_batches(self, tokens: Sequence[int], logits_for: str = "last") -> Iterator[int]:
        """`decode`, a batch of n_batch tokens at a time: yields how many of `tokens` are cached after each.

        A caller that stops iterating part-way (a prompt's Stop) leaves the cache holding the batches done.
        The checks run before the first batch, when the generator is made.
        """
        n = len(tokens)
        if logits_for == "all" and n > self.max_rows:
            # llama.cpp aborts the process on an oversized batch; refuse before it gets there.
            raise LlamaError(f"{n} rows with logits exceed this context's limit of {self.max_rows} "
                             "(n_batch, n_outputs_max)")
        if self.n_past + n > self.n_ctx:
            raise ContextFullError(self.n_past + n, self.n_ctx)
        return self._batches(tokens, logits_for)

    def _batches(self, tokens: Sequence[int], logits_for: str) -> Iterator[int]:
        n = len(tokens)
        start = 0
        if self.model.recurrent and n > self.n_rs_seq + 1:
            # A verify longer than the snapshots reach (or any, without them): its rollback will need the state
            # from before it.
            self.checkpoint()
        while start < n:
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + len(chunk) >= n
            batch = self._batch
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = self.n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = logits_for == "all" or (logits_for == "last" and last_chunk and i == len(chunk) - 1)
            batch.n_tokens = len(chunk)
            self._n_out, self._rows = 0, None  # no rows until this decode succeeds
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ctx, batch)
            # On GPU backends llama_decode only queues the work; the wait would otherwise fall into
            # the first llama_get_logits_ith, outside every timer, and verify steps would look free.
            llama_cpp.llama_synchronize(self._ctx)
            self.native_ms += (time.perf_counter() - t0) * 1000.0
            if rc != 0:
                # Leave the cache as it was before this chunk: the caller's view stays consistent (a recurrent
                # state cannot be cut, so there it is emptied).
                if self.model.recurrent or not llama_cpp.llama_memory_seq_rm(self._mem, 0, self.n_past, -1):
                    self.clear()
                raise LlamaError(f"llama_decode failed with code {rc} on {self.model.path.name} (KV cache full?)")
            self._n_out = len(chunk) if logits_for == "all" else int(logits_for == "last" and last_chunk)
            start_pos = self.n_past
            self.tokens.extend(chunk)
            if self.follower is not None:
                self.follower.follow(chunk, start_pos)
            # Snapshots exist for the chunk's last min(len, n_rs_seq + 1) tokens: a cut may drop all but one.
            self._reach = min(len(chunk) - 1, self.n_rs_seq)
            start += len(chunk)
            yield start

    def logits(self, row: int = -1) -> np.ndarray:
        """A zero-copy view of the logits of output row `row` of the last decode call (valid until the next):
        with logits for "all", row i is batch token i; with "last", row 0 (or -1) is the last token's."""
        rows = self._rows if self._rows is not None else self._output_rows()
        if not -rows.shape[0] <= row < rows.shape[0]:
            raise LlamaError(f"no logits for row {row} of the last batch ({rows.shape[0]} rows had logits)")
        return rows[row]

    def _output_rows(self) -> np.ndarray:
        """The last decode's output rows as one (rows, n_vocab) view. llama_get_logits gives them in batch order
        (llama-context.cpp); its buffer only grows, so a view made at the same address stays in bounds."""
        n_vocab = self.model.n_vocab
        ptr = llama_cpp.llama_get_logits(self._ctx) if self._n_out else None
        if not ptr:
            raise LlamaError(f"llama.cpp holds no logits for the last batch on {self.model.path.name}")
        address = ctypes.addressof(ptr.contents)
        view = self._out_view
        if view is None or self._out_address != address or view.shape[0] < self._n_out:
            buffer = (ctypes.c_float * (self._n_out * n_vocab)).from_address(address)
            view = self._out_view = np.frombuffer(memoryview(buffer), dtype=np.float32).reshape(self._n_out, n_vocab)
            self._out_address = address
        self._rows = view[: self._n_out]
        return self._rows

    def keep_last_logits(self) -> None:
        """Keep a copy of the last decode's last row, the logits after everything cached so far."""
        self._kept = (self.n_past, np.array(self.logits(-1)))

    def kept_logits(self, n: int) -> np.ndarray | None:
        """The kept logits if they follow exactly the first n cached positions, else None."""
        kept = self._kept
        return kept[1] if kept is not None and kept[0] == n <= self.n_past else None

    def truncate(self, n_keep: int) -> None:
        """Drop every cached position >= n_keep (the rollback after a rejected draft).

        Recurrent and hybrid models (Mamba, LFM2, Qwen3.5, Granite 4 H ...) keep a state, not one entry per
        position: `_cut_state` rolls it back exactly. Where llama.cpp still refuses a cut (a sliding window
        already overwritten), the cache and `tokens` must never disagree, so the cache is emptied and
        `PartialRemovalError` says why (the caller re-processes).
        """
        if n_keep < self.n_past:
            if self.follower is not None:
                self.follower.cut(n_keep)  # first: a replay below decodes from before n_keep
            if not self._window_kept(n_keep):
                self.clear()
                raise PartialRemovalError(self.model.path.name, n_keep, sliding=True)
            if self.model.recurrent:
                self._cut_state(n_keep)
            elif not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
                self.clear()
                raise PartialRemovalError(self.model.path.name, n_keep)
            del self.tokens[n_keep:]
        if self._kept is not None and n_keep < self._kept[0]:
            self._kept = None

    def _cut_state(self, n_keep: int) -> None:
        """Cut a recurrent or hybrid model's cache back to n_keep, exactly, by the cheapest way that works:
        llama.cpp's snapshot of the state after token n_keep - 1 (a rollback within the last decode, once), else
        the checkpoint at or before n_keep and a replay of the tokens after it, else all of them again. The
        snapshot path is checked here, not by llama.cpp: it would roll back past the last decode's tokens to a
        stale snapshot without a word."""
        back = self.n_past - n_keep
        if 0 < back <= self._reach and llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            self._reach = 0  # single-use: the next cut before a decode takes another way
            self.cuts["snapshot"] += 1
            if self._checkpoint is not None and self._checkpoint.n_past > n_keep:
                self._checkpoint = None
            return
        replay = self.tokens[:n_keep]
        ckpt = self._checkpoint
        if ckpt is not None and ckpt.n_past <= n_keep:
            read = int(llama_cpp.llama_state_seq_set_data_ext(self._ctx, ckpt.state, len(ckpt.state), 0,
                                                               STATE_PARTIAL))
            # The state is back at the checkpoint; a hybrid's attention cache still holds every position: cut it.
            if read == len(ckpt.state) and llama_cpp.llama_memory_seq_rm(self._mem, 0, ckpt.n_past, -1):
                del self.tokens[ckpt.n_past:]
                self.cuts["checkpoint"] += 1
                self._replay(replay[ckpt.n_past:])
                return
        self.clear()
        self.cuts["reprocess"] += 1
        self._replay(replay)

    def _replay(self, tokens: Sequence[int]) -> None:
        """Decode tokens the cache held before a cut (their logits are not needed), and keep a checkpoint after
        them: the next cut is most likely back to about here."""
        for _ in self._batches(tokens, "none"):
            pass
        self._reach = 0
        self.checkpoint()

    def checkpoint(self) -> None:
        """Copy a recurrent or hybrid model's state (its recurrent part: the attention cache is cut, not copied)
        at n_past, for a later cut that the snapshots cannot serve. One is kept; this replaces it."""
        if not self.model.recurrent or (self._checkpoint is not None and self._checkpoint.n_past == self.n_past):
            return
        size = int(llama_cpp.llama_state_seq_get_size_ext(self._ctx, 0, STATE_PARTIAL))
        state = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data_ext(self._ctx, state, size, 0, STATE_PARTIAL))
        self._checkpoint = _Checkpoint(self.n_past, state) if written == size else None

    def _window_kept(self, n_keep: int) -> bool:
        """Whether the cache still holds every position the token after a cut to `n_keep` attends to. A
        sliding-window model (Gemma 3, gpt-oss ...) overwrites positions older than its window as the reply
        grows, and llama.cpp's cut succeeds regardless: going back far (a follow-up that shares only an early
        prefix, an edited old message) would then decode without part of the window, silently not the model's
        own output. A rollback of a few drafts stays well inside what the cache keeps (the window plus a batch)."""
        n_swa = self.model.n_swa
        if n_swa <= 0 or n_keep <= 0 or self.config.swa_full:  # a full-size window cache overwrites nothing
            return True
        return int(llama_cpp.llama_memory_seq_pos_min(self._mem, 0)) <= max(0, n_keep - n_swa)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()
        self._kept = None
        self._reach = 0
        self._checkpoint = None
        if self.follower is not None:
            self.follower.cut(0)

    def snapshot_bytes(self) -> int:
        """What `snapshot` would copy of llama.cpp's state (and the follower's), without copying it."""
        own = int(llama_cpp.llama_state_seq_get_size(self._ctx, 0))
        return own + (self.follower.snapshot_bytes() if self.follower is not None else 0)

    def snapshot(self) -> CacheSnapshot:
        """A copy of what the cache holds (llama_state_seq_get_data: about 28 KiB a token for the 1.5B demo target),
        with the follower's copy of the same positions."""
        state = copy_sequence_state(self._ctx, f"{self.model.path.name}'s cache")
        follower = self.follower.snapshot() if self.follower is not None else None
        return CacheSnapshot(tuple(self.tokens), state, self._kept, follower)

    def can_restore(self, snapshot: CacheSnapshot) -> bool:
        """Whether `restore` would leave the follower (if any) holding the snapshot's positions too: a snapshot
        taken while nothing followed has none of the follower's pairs, and the follower would miss them."""
        return self.follower is None or snapshot.follower is not None

    def restore(self, snapshot: CacheSnapshot) -> None:
        """Replace the cache with a snapshot of this context's, and the follower's with the snapshot's copy; on
        failure both are left empty."""
        if not self.can_restore(snapshot):
            raise LlamaError("this cache snapshot holds none of the MTP head's positions: it cannot come back while "
                             "the head follows the cache")
        self.clear()
        if not set_sequence_state(self._ctx, snapshot.state):
            self.clear()
            raise LlamaError(f"llama.cpp could not restore a cache snapshot of {self.model.path.name}")
        if self.follower is not None and snapshot.follower is not None:
            try:
                self.follower.restore(snapshot.follower)
            except LlamaError:
                self.clear()
                raise
        self.tokens.extend(snapshot.tokens)
        self._kept = snapshot.kept
        self._reach = 0

    @property
    def max_rows(self) -> int:
        """Most rows one decode call may ask logits for."""
        return min(self.n_batch, self.config.n_outputs_max)

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def keep_common_prefix(self, tokens: Sequence[int], known: int = 0) -> int:
        """Drop the cache beyond its longest common prefix with `tokens`; return that prefix length.

        `known`: the caller vouches that the first `known` positions already agree (the reply only
        appended since then), so a step compares a few tokens, not the whole context.
        """
        limit = min(len(self.tokens), len(tokens))
        common = min(known, limit)
        while common < limit and self.tokens[common] == tokens[common]:
            common += 1
        try:
            self.truncate(common)
        except PartialRemovalError:
            return 0  # the cache was emptied: the caller processes all of `tokens`, which is exact
        # The tokens the caller's next cut is likely to go back to (a draft model's context, re-synced each step).
        self.checkpoint()
        return common

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None


class CacheFollower(Protocol):
    """What follows a context's cache position by position (LlamaContext.follower)."""

    def follow(self, tokens: Sequence[int], start: int) -> None:
        """The context just decoded `tokens` at positions start..; its outputs are still readable."""

    def cut(self, n: int) -> None:
        """The context's cache is being cut to its first n positions."""

    def snapshot_bytes(self) -> int:
        """What `snapshot` would copy."""

    def snapshot(self) -> FollowerSnapshot:
        """A copy of what it holds for the context's positions, kept with the context's own (CacheSnapshot)."""

    def restore(self, snapshot: FollowerSnapshot) -> None:
        """Put back a copy `snapshot` made, as the context's cache is put back."""


class FollowerSnapshot(Protocol):
    @property
    def nbytes(self) -> int: ...


# llama_state_seq_*_ext: the partial state only (a recurrent state, not the attention cache).
STATE_PARTIAL = 1


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    n_past: int
    state: ctypes.Array[ctypes.c_uint8] = field(repr=False)


class PartialRemovalError(LlamaError):
    def __init__(self, model: str, n_keep: int, sliding: bool = False) -> None:
        if sliding:
            why = (f"{model}: its cache no longer holds the attention window that position {n_keep} needs (a "
                   "sliding-window model overwrites older positions), so it cannot be cut back there. The cache "
                   "was emptied and the prompt is processed again, which is exact.")
        else:
            why = (f"{model}: llama.cpp refused to cut this model's cache back to {n_keep} tokens. The cache was "
                   "emptied rather than left out of step with the reply, and the prompt is processed again, which "
                   "is exact.")
        super().__init__(why)
        self.n_keep = n_keep


class ContextFullError(LlamaError):
    def __init__(self, needed: int, n_ctx: int) -> None:
        super().__init__(
            f"The conversation needs {needed} tokens but the context holds {n_ctx}. "
            "Start a new chat, shorten the prompt, or raise the context size (-c)."
        )
        self.needed = needed
        self.n_ctx = n_ctx


def reference_prompt_lookup_tps(target: Path, prompts: dict[str, list[int]], n_predict: int, n_ctx: int,
                                n_threads: int) -> dict[str, dict[str, float]]:
    """Tokens/s of llama-cpp-python's own high-level `Llama`, plain and with its
    `LlamaPromptLookupDecoding` (its defaults), on the same prompt tokens, greedy, timed from the
    first streamed token to the last (prefill excluded), for a side-by-side comparison."""
    import time

    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    out: dict[str, dict[str, float]] = {p: {} for p in prompts}
    for label, draft in (("plain", None), ("prompt_lookup", LlamaPromptLookupDecoding())):
        llm = llama_cpp.Llama(model_path=str(target), n_ctx=n_ctx, n_threads=n_threads or default_threads(),
                              flash_attn=True, draft_model=draft, verbose=False)
        try:
            for prompt_id, tokens in prompts.items():
                llm.reset()
                stamps: list[float] = []
                for _chunk in llm.create_completion(tokens, max_tokens=n_predict, temperature=0.0, top_k=1,
                                                    stream=True):
                    stamps.append(time.perf_counter())
                if len(stamps) > 1:
                    out[prompt_id][label] = (len(stamps) - 1) / (stamps[-1] - stamps[0])
        finally:
            llm.close()
    return out

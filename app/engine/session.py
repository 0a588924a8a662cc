"""A loaded target/draft pair ready to chat: what the CLI, the GUI worker, the benchmark and the
tests hold. Create, use and close it on one thread (the one that owns the llama contexts)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from app.engine.draft_policy import resolve_copies
from app.engine.drafters import (
    CHOICES,
    MODES,
    NEEDS_DRAFT,
    NEEDS_MTP,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    NoDrafter,
    auto_mode,
)
from app.engine.events import Event, FinishEvent
from app.engine.memory_plan import check_fits, placing_for, predict_for_config
from app.engine.mtp_drafter import MtpDrafter
from app.engine.ngram_index import common_prefix
from app.engine.one_token_bound import OneTokenBound, probe_tokens
from app.engine.one_token_bound import remembered as remembered_bound
from app.engine.pair_config import PairConfig
from app.engine.prediction import PredictionProposer
from app.engine.prompt_cache import PromptCache
from app.engine.proposal import Proposer
from app.engine.sampling import SamplingParams
from app.engine.speculative import SpecEngine, SpecParams
from app.engine.turn_memory import TurnMemory
from app.llama_backend import (
    ContextConfig,
    LlamaContext,
    LlamaError,
    LlamaModel,
    ModelConfig,
    default_threads,
    loaded_backends,
    rpc,
    supports_gpu_offload,
    system_info,
)
from app.llama_backend.mtp import MtpContext
from app.models import chat_template
from app.models.gguf_meta import has_mtp_layers
from app.models.pair_doctor import check_pair
from app.paths import cache_dir


class IncompatiblePairError(LlamaError):
    """The draft cannot speculate for this target; we say why instead of silently decoding plain."""


@dataclass(frozen=True, slots=True)
class GenParams:
    mode: str = "draft"
    n_predict: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    spec: SpecParams = field(default_factory=SpecParams)
    track_margins: bool = False

    def with_mode(self, mode: str) -> GenParams:
        return replace(self, mode=mode)


LoadProgress = Callable[[str, float], bool | None]  # return False to stop loading (the app is closing)


class SpecSession:
    def __init__(self, config: PairConfig, progress: LoadProgress | None = None) -> None:
        self.config = config
        self._closed = False
        if config.draft is not None:
            check_pair_or_raise(config.target, config.draft)
        self.placing = placing_for(config)  # RPC servers joined (and checked) here
        if not config.force:
            self.prediction = check_fits(config, placing=self.placing)  # both models counted, before loading
        report = progress or (lambda _label, _fraction: None)
        self.target_model = LlamaModel(ModelConfig(config.target, config.n_gpu_layers, repack=config.repack,
                                                   devices=self.placing.target_devices,
                                                   load_mtp=has_mtp_layers(config.target)),
                                       progress=lambda f: report("target", f) is not False)
        ctx_cfg = ContextConfig(n_ctx=config.n_ctx, n_batch=config.n_batch, n_ubatch=config.n_batch,
                                n_threads=config.n_threads, flash_attn=config.flash_attn,
                                type_k=config.type_k, type_v=config.type_v)
        self.target_ctx = LlamaContext(self.target_model, ctx_cfg)
        self._ctx_cfg = ctx_cfg
        # Strict replies keep their verifies where this context's batches were measured to give one-token
        # decoding's bits: only where no repacking or GPU rules it out, seconds once per model file, build and
        # context settings (the answer is kept in the cache folder).
        self.one_token: OneTokenBound | None = None
        if self.target_model.one_token_kernels_may_apply:
            tokens = probe_tokens(lambda text: self.target_model.tokenize(text, add_special=False))
            self.one_token = remembered_bound(self.target_ctx, tokens, self._probe_key(ctx_cfg),
                                              cache_dir() / "one_token_bounds.json")
        self.mtp_head: MtpContext | None = None  # made at the first `mtp` reply
        self.draft_model: LlamaModel | None = None
        self.draft_ctx: LlamaContext | None = None
        if config.draft is not None:
            self.draft_model = LlamaModel(ModelConfig(config.draft, config.n_gpu_layers_draft, repack=config.repack,
                                                      devices=self.placing.draft_devices),
                                          progress=lambda f: report("draft", f) is not False)
            draft_threads = config.n_threads if config.n_threads_draft is None else config.n_threads_draft
            self.draft_ctx = LlamaContext(self.draft_model, replace(ctx_cfg, n_ctx=config.n_ctx_draft or config.n_ctx,
                                                                    n_threads=draft_threads))
        self._engines: dict[str, SpecEngine] = {}
        # Kept caches of earlier prompts, a quarter of the budget for the draft model's (its cache is the smaller).
        budget = prompt_cache_bytes(config)
        self.prompt_cache = PromptCache(budget - budget // 4) if budget > 0 else None
        self.draft_prompt_cache = PromptCache(budget // 4) if budget > 0 and self.draft_ctx is not None else None
        self._turns = TurnMemory()
        self._rendered: dict[tuple[int, ...], str] = {}  # follow-up prompts' ids -> their text, newest last

    def _probe_key(self, ctx_cfg: ContextConfig) -> str:
        """What the strict bound's probe answer depends on: the target file as it is now, llama.cpp's build and
        the CPU module it runs (system_info names both), and the context's threads, attention and cache types."""
        path = self.config.target.resolve()
        stat = path.stat()
        threads = ctx_cfg.n_threads or default_threads()
        return (f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{loaded_backends().cpu_variant}|{system_info()}|"
                f"threads={threads}|fa={ctx_cfg.flash_attn}|k={ctx_cfg.type_k}|v={ctx_cfg.type_v}|"
                f"ubatch={ctx_cfg.n_ubatch}")

    @property
    def available_modes(self) -> tuple[str, ...]:
        return tuple(m for m in MODES if (self.draft_ctx is not None or m not in NEEDS_DRAFT)
                     and (self.target_model.config.load_mtp or m not in NEEDS_MTP))

    @property
    def auto_mode(self) -> str:
        """What mode "auto" runs on this session (see drafters.CHOICES)."""
        return auto_mode(self.draft_ctx is not None, supports_gpu_offload(), self.target_model.config.load_mtp)

    @property
    def target_on_gpu(self) -> bool:
        return supports_gpu_offload() and self.config.n_gpu_layers != 0

    def resolve_spec(self, spec: SpecParams) -> SpecParams:
        """The speculation settings a reply runs with: "auto" values resolved for this session, and long copies
        judged as this device pays for them: by the copy governor where the target runs on a GPU, as sure
        copies only on the CPU (drafters.AUTO_COPY_MAX), where "auto" lets one run longer after a clean one
        (drafters.SURE_COPY_LONG)."""
        return resolve_copies(spec, self.target_on_gpu)

    def _engine(self, mode: str, spec: SpecParams) -> SpecEngine:
        if mode not in CHOICES:
            raise ValueError(f"Unknown mode {mode!r}: use one of {', '.join(CHOICES)}.")
        if mode == "auto":
            mode = self.auto_mode
        if mode in NEEDS_DRAFT and self.draft_ctx is None:
            raise LlamaError(f"Mode {mode!r} needs a draft model (-md). Use --mode lookup to speculate without one.")
        if mode in NEEDS_MTP and not self.target_model.config.load_mtp:
            raise LlamaError(f"Mode {mode!r} needs a target with MTP (NextN) layers; "
                             f"{self.target_model.path.name} has none. Use --mode lookup or a draft model.")
        engine = self._engines.get(mode)
        if engine is None:
            drafter: Proposer
            if mode in NEEDS_DRAFT:
                assert self.draft_ctx is not None
                # One ModelDrafter per session would be cleaner, but each engine owns its drafter; both
                # sync the shared draft context from its recorded tokens, so they never disagree.
                model = ModelDrafter(self.draft_ctx)
                drafter = model if mode == "draft" else HybridDrafter(model)
            elif mode in NEEDS_MTP:
                if self.mtp_head is None:
                    self.mtp_head = MtpContext(self.target_ctx, self._ctx_cfg)
                drafter = MtpDrafter(self.mtp_head)
            else:
                drafter = {"none": NoDrafter, "lookup": LookupDrafter}[mode]()
            # All engines share one target context, which records what its cache holds, and one prompt cache. The
            # MTP head pairs every cached position with the target's hidden state there, so in mode mtp a kept
            # cache comes back only with the head's copy of the same positions (CacheSnapshot.follower).
            engine = SpecEngine(self.target_ctx, drafter, prompt_cache=self.prompt_cache, one_token=self.one_token)
            self._engines[mode] = engine
        model_drafter = engine.drafter.model if isinstance(engine.drafter, HybridDrafter) else engine.drafter
        if isinstance(model_drafter, ModelDrafter | MtpDrafter):
            model_drafter.p_min, model_drafter.draft_min = spec.p_min, spec.draft_min
        if isinstance(model_drafter, ModelDrafter):
            model_drafter.one_row_catch_up = spec.steady_shapes
            model_drafter.prompt_cache = self.draft_prompt_cache
        return engine

    def device_layers(self) -> list[dict[str, Any]]:
        """Where each model's layers went: [{model, name, kind, layers, endpoint?}] (llama.cpp counts the
        output layer as one more), from the prediction of exactly what was loaded."""
        pred = getattr(self, "prediction", None) or predict_for_config(self.config, placing=self.placing)
        out: list[dict[str, Any]] = []
        for m in (pred.target, pred.draft):
            if m is None:
                continue
            counts = Counter(m.placement.layer_device)
            counts[m.placement.output_device] += 1
            for name, layers in counts.items():
                endpoint = rpc.endpoint_of(name)
                kind = "rpc" if endpoint else "cpu" if name == "CPU" else "gpu"
                out.append({"model": m.role, "name": name, "kind": kind, "layers": layers,
                            **({"endpoint": endpoint} if endpoint else {})})
        return out

    def chat_prompt(self, messages: Sequence[dict[str, Any]], reuse_replies: bool = False) -> list[int]:
        """Ending on an assistant message means "continue this reply" (one cut by the token limit).

        `reuse_replies` (a chat's follow-up turn): where the text starts with an earlier prompt and the reply
        generated for it, take their ids as the target saw and wrote them (turn_memory), so the KV cache's prefix
        still matches; otherwise the text is tokenized whole, as it always is without the flag."""
        model = self.target_model
        text = chat_template.render(model.chat_template(), messages,
                                    bos=model.token_text(model.bos) if model.bos >= 0 else "",
                                    eos=model.token_text(model.eos) if model.eos >= 0 else "",
                                    continue_final=bool(messages) and messages[-1].get("role") == "assistant")
        if not reuse_replies:
            return model.tokenize(text, add_special=True, parse_special=True)
        tokens = self._turns.prompt(text, lambda part, first: model.tokenize(part, add_special=first,
                                                                              parse_special=True))
        key = tuple(tokens)
        self._rendered.pop(key, None)
        self._rendered[key] = text
        while len(self._rendered) > 8:
            del self._rendered[next(iter(self._rendered))]
        return tokens

    def generate(self, prompt: Sequence[int], params: GenParams, cancel: threading.Event | None = None,
                 prediction: Sequence[int] | None = None) -> Iterator[Event]:
        """One reply to `prompt`. `prediction`: the tokens the reply is expected to mostly repeat (a request's
        predicted output, `prediction_tokens`): the reply then runs on an engine whose proposer copies them
        wherever the reply follows them, and the mode's drafter proposes elsewhere (app/engine/prediction.py)."""
        spec = self.resolve_spec(params.spec)
        engine = self._engine(params.mode, spec)
        self._follow_with_head(isinstance(engine.drafter, MtpDrafter))
        if prediction:
            # A one-reply engine around the mode's own drafter: the same target context and prompt caches, and the
            # drafter's state (lookup's index, the draft model's cache) carries on as in the mode's engine.
            engine = SpecEngine(engine.target, PredictionProposer(engine.drafter, prediction),
                                prompt_cache=engine.prompt_cache, one_token=engine.one_token)
        events = engine.generate(prompt, params.n_predict, params.sampling, spec, cancel, params.track_margins)
        text = self._rendered.get(tuple(prompt))
        return events if text is None else self._remembering(events, prompt, text)

    def _follow_with_head(self, on: bool) -> None:
        """Attach the MTP head to the target's cache for an `mtp` reply (it pairs every decoded position with the
        target's hidden state), detach it otherwise. Re-attached, it keeps the positions it shares with the
        target's cache; the target re-decodes from the last of them, whose hidden state the next pairs with."""
        head = self.mtp_head
        if not on or head is None:
            self.target_ctx.follower = None
            return
        if self.target_ctx.follower is head:
            return
        target = self.target_ctx
        common = common_prefix(head.tokens, target.tokens)
        head.cut(common)
        if target.n_past > max(common - 1, 0):
            target.truncate(max(common - 1, 0))
        target.follower = head

    def _remembering(self, events: Generator[Event, None, None], prompt: Sequence[int], text: str) -> Iterator[Event]:
        """Pass the events on; remember the finished reply's ids for the follow-up when they spell its text
        exactly (not when a character was cut off at the end, or a control token, which renders as nothing, was
        written)."""
        model = self.target_model
        with closing(events):  # a consumer that stops early closes the engine's run too (its cache rewind)
            for event in events:
                if isinstance(event, FinishEvent) and all(model.piece(t) for t in event.tokens) \
                        and model.detokenize(event.tokens) == event.text:
                    self._turns.remember(text + event.text, (*prompt, *event.tokens))
                yield event

    def generate_chat(self, messages: Sequence[dict[str, Any]], params: GenParams,
                      cancel: threading.Event | None = None,
                      prediction: Sequence[int] | None = None) -> Iterator[Event]:
        """One turn of a chat: the prompt reuses the ids of the turns before it (chat_prompt's reuse_replies)."""
        return self.generate(self.chat_prompt(messages, reuse_replies=True), params, cancel, prediction)

    def prediction_tokens(self, text: str) -> list[int]:
        """A predicted output's text as the reply would write it: the target's tokens, no BOS, and special-token
        text (`<|im_end|>`) left as text, as the reply's own tokens never hold a special token's id for it."""
        return self.target_model.tokenize(text, add_special=False, parse_special=False)

    def clear_caches(self) -> None:
        """Forget every cached prompt, so the next reply prefills from scratch as a freshly started llama.cpp
        does. A reused prefix was computed in other batches, and CPU kernels can round a row differently by
        its place in a batch: enough to flip a near-tie in the first token (the bench compares replies). The ids of
        earlier replies and the kept caches of earlier prompts are forgotten too: the next prompt is tokenized and
        processed whole."""
        self._turns.clear()
        self._rendered.clear()
        for cache in (self.prompt_cache, self.draft_prompt_cache):
            if cache is not None:
                cache.clear()
        for ctx in (self.target_ctx, self.draft_ctx):
            if ctx is not None:
                ctx.clear()
        if self.mtp_head is not None:
            self.mtp_head.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.mtp_head is not None:
            self.target_ctx.follower = None
            self.mtp_head.close()
        for ctx in (self.draft_ctx, self.target_ctx):
            if ctx is not None:
                ctx.close()
        for model in (self.draft_model, self.target_model):
            if model is not None:
                model.close()

    def __enter__(self) -> SpecSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def prompt_cache_bytes(config: PairConfig) -> int:
    """The host memory PairConfig.prompt_cache_mb allows for kept prompt caches."""
    if config.prompt_cache_mb >= 0:
        return config.prompt_cache_mb << 20
    if config.rpc:
        return 0
    return min(1 << 30, psutil.virtual_memory().total // 16)


def check_pair_or_raise(target: Path, draft: Path) -> None:
    """llama.cpp's compatibility rules, read from metadata before any weights load."""
    report = check_pair(target, draft)
    if not report.compatible:
        raise IncompatiblePairError(
            f"Draft {Path(draft).name} cannot speculate for target {Path(target).name}: {report.reason}. "
            "Pick a draft of the same family and tokenizer (see `specchat check-pair`), or use --mode lookup."
        )

"""In-process planner policy: transformers + peft, CPU or GPU, exact behaviour logprobs.

:class:`LocalPolicy` holds ONE copy of the base weights. Adapter versions are peft LoRA adapters
resident under immutable names ``f"{name}@v{version}"`` on a single ``PeftModel``; version 0 is the
base model. Every recorded logprob is ``log_softmax(logits / T)`` over the full vocabulary, in
float32, of the logits actually sampled from (``top_p`` only truncates what is sampled from; a
logits mask renormalises, see :mod:`.sampling`). :class:`LocalTextModel` answers chat requests with
the same weights, adapters disabled.

Two engines (``engine=``):
- ``"fast"`` (default): :class:`~.engine.FastEngine` over :class:`~.lean.LeanLlama` -- static KV
  cache, a lean forward, continuous batching of concurrent calls (any adapter versions), prompt
  prefixes shared within a call and kept across calls. Llama-architecture models only; other
  models, and adapters it cannot run (DoRA...), use the eager engine, with a log line saying so.
- ``"eager"``: the transformers-forward loop of :mod:`.sampling` (the previous behaviour and the
  benchmark baseline); one call at a time under a lock (peft's active adapter is global state).

``dtype="auto"`` (default) is bfloat16 where bf16 matmuls are fast (AMX CPUs, bf16 GPUs) and
float32 elsewhere (:mod:`.numerics`); :attr:`LocalPolicy.engine_label` (``"local/float32"``...) is
recorded with every action.

What is covered: float32 CPU (logprobs match a fresh transformers forward within 1e-4, both
engines) and bf16 (logprobs are exactly those of the bf16 logits sampled from; they differ from a
float32 recomputation, see BENCHMARKS.md). What is not: merged adapters, QLoRA at rollout time,
CUDA graphs (the fast engine runs on GPUs with the same code, unmeasured here).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from streamgrpo.avro import records as R
from streamgrpo.inference.base import BASE_VERSION, Generation, PlannerPolicy, served_name
from streamgrpo.inference.engine import EngineRequest, FastEngine
from streamgrpo.inference.errors import AdapterLoadError, AdapterNotResidentError, PolicyError
from streamgrpo.inference.lean import LeanAdapter, LeanLlama, unsupported_reason
from streamgrpo.inference.numerics import dtype_name, engine_label, resolve_dtype
from streamgrpo.inference.sampling import LogitsMask, Sampled, sample_batch
from streamgrpo.inference.stopping import JsonObjectEnd

log = logging.getLogger(__name__)

#: Accepted values of ``engine``.
ENGINES = ("fast", "eager")


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """EOS ids from the generation config (the GGUF-converted tokenizer mislabels its eos token)."""
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            return set(value) if isinstance(value, (list, tuple)) else {int(value)}
    if tokenizer.eos_token_id is None:
        raise PolicyError("the model defines no eos_token_id; pass eos_token_ids explicitly")
    return {int(tokenizer.eos_token_id)}


class LocalPolicy(PlannerPolicy):
    """Transformers + peft planner policy (see module docstring)."""

    applies_logits_mask = True

    def __init__(
        self,
        model_name_or_path: str = "smollm2-135m-instruct",
        device: str = "cpu",
        cache_dir: str | Path | None = None,
        dtype: str = "auto",
        keep_last: int = 4,
        eos_token_ids: set[int] | None = None,
        engine: str = "fast",
        prefix_cache_tokens: int = 4096,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from streamgrpo.models.base import resolve_base_model

        choice = resolve_dtype(dtype, device)
        path = resolve_base_model(model_name_or_path, cache_dir)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=choice.dtype)
        except (OSError, ValueError) as exc:
            raise PolicyError(f"cannot load base model {model_name_or_path!r} from {path}: {exc}") from exc
        log.info("local policy dtype %s (%s: %s)", choice.name, dtype, choice.reason)
        self._setup(model, tokenizer, device, keep_last, eos_token_ids, str(model_name_or_path), engine,
                    prefix_cache_tokens)

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, *, device: str = "cpu", keep_last: int = 4,
        eos_token_ids: set[int] | None = None, base_model: str = "in-process", engine: str = "fast",
        prefix_cache_tokens: int = 4096,
    ) -> LocalPolicy:
        """Wrap an already built model + tokenizer (tests, notebooks); ``model`` is used in place
        (the fast engine re-points its projection weights to views of fused tensors)."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, device, keep_last, eos_token_ids, base_model, engine, prefix_cache_tokens)
        return self

    def _setup(self, model: Any, tokenizer: Any, device: str, keep_last: int, eos_token_ids: set[int] | None,
               base_model: str, engine: str, prefix_cache_tokens: int) -> None:
        if engine not in ENGINES:
            raise PolicyError(f"engine {engine!r} is not one of {list(ENGINES)}")
        PlannerPolicy.__init__(self, keep_last)
        self.device = torch.device(device)
        self.base_model = base_model
        self.tokenizer = tokenizer
        self._base = model.to(self.device).eval()
        self._peft: Any = None
        self._lock = threading.RLock()
        self.eos_ids = set(eos_token_ids) if eos_token_ids else _eos_ids(model, tokenizer)
        pad = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        #: prefill a repeated prompt once for all its rows (a group's first turn); off only to measure it
        self.share_prefill = True
        self.dtype = next(self._base.parameters()).dtype
        #: recorded as ``PlannerAction.engine``: backend and the dtype the behaviour logprobs come from
        self.engine_label = engine_label("local", self.dtype)
        self._fast: FastEngine | None = None
        self._lean_adapters: dict[tuple[str, int], LeanAdapter | None] = {}  # None: eager only
        reason = unsupported_reason(self._base) if engine == "fast" else "engine='eager' was asked for"
        if reason is None:
            self._fast = FastEngine(LeanLlama(self._base), prefix_cache_tokens=prefix_cache_tokens)
        log.info("local policy: %s engine, %s%s", "fast" if self._fast else "eager", dtype_name(self.dtype),
                 "" if reason is None else f" ({reason})")

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (a logits mask has this many entries)."""
        return int(self._base.get_output_embeddings().weight.shape[0])

    @property
    def engine(self) -> str:
        """``"fast"`` or ``"eager"``: the engine serving the base model."""
        return "fast" if self._fast is not None else "eager"

    def close(self) -> None:
        """Stop the fast engine's thread (idempotent); the policy cannot generate afterwards."""
        if self._fast is not None:
            self._fast.close()

    # -- prompts ----------------------------------------------------------------------------------
    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        encoded = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
        return [int(t) for t in ids]

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    # -- generation -------------------------------------------------------------------------------
    def generate(
        self, prompts: list[list[int]], sampling: R.SamplingParams, *, adapter_name: str, adapter_version: int,
        stop: JsonObjectEnd | None = None, logits_mask: LogitsMask | None = None, seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """See :meth:`PlannerPolicy.generate`; ``logits_mask`` is the per-row constraint hook of
        :mod:`.sampling` (recorded logprobs are then those of the masked, renormalised distribution);
        ``seeds``: row ``i`` draws from its own generator seeded ``seeds[i]`` (both engines)."""
        if not prompts:
            return []
        if sampling.max_new_tokens < 1:
            raise PolicyError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
        if seeds is not None and len(seeds) != len(prompts):
            raise PolicyError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        seed: int | tuple[int, ...] | None = tuple(seeds) if seeds is not None else sampling.seed
        start = time.perf_counter()
        self._slots.pin(adapter_name, adapter_version)  # raises AdapterNotResidentError
        try:
            lean = self._fast_adapter(adapter_name, adapter_version)
            if lean is False:
                with self._lock:
                    sampled = self._sample(prompts, sampling, adapter_name, adapter_version, stop, logits_mask, seed)
            else:
                sampled = self._sample_fast(prompts, sampling, (adapter_name, adapter_version), lean, stop,
                                            logits_mask, seed)
        finally:
            self._slots.unpin(adapter_name, adapter_version)
        latency = int((time.perf_counter() - start) * 1000)
        return [
            Generation(prompt_token_ids=list(p), text=self.decode(s.token_ids), token_ids=s.token_ids,
                       logprobs=s.logprobs, adapter_name=adapter_name, adapter_version=adapter_version,
                       latency_ms=latency, engine=self.engine_label)
            for p, s in zip(prompts, sampled, strict=True)
        ]

    def _fast_adapter(self, name: str, version: int) -> LeanAdapter | None | bool:
        """The lean adapter serving ``version`` (None: the base model), or False: use the eager engine."""
        if self._fast is None:
            return False
        if version == BASE_VERSION:
            return None
        lean = self._lean_adapters.get((name, version))
        return False if lean is None else lean

    def _sample_fast(self, prompts: list[list[int]], sampling: R.SamplingParams, key: tuple[str, int],
                     lean: LeanAdapter | None, stop: JsonObjectEnd | None, logits_mask: LogitsMask | None,
                     seed: int | tuple[int, ...] | None) -> list[Sampled]:
        assert self._fast is not None
        request = EngineRequest(
            prompts=[list(p) for p in prompts], temperature=sampling.temperature, top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens, eos_ids=frozenset(self.eos_ids), seed=seed,
            adapter_key=None if lean is None else key, adapter=lean,
            stop=self._stop_callback(stop, len(prompts)), logits_mask=logits_mask)
        return self._fast.generate(request)

    def _sample(self, prompts: list[list[int]], sampling: R.SamplingParams, name: str, version: int,
                stop: JsonObjectEnd | None, logits_mask: LogitsMask | None = None,
                seed: int | tuple[int, ...] | None = None) -> list[Any]:
        kwargs = dict(temperature=sampling.temperature, top_p=sampling.top_p,
                      max_new_tokens=sampling.max_new_tokens, eos_ids=self.eos_ids, pad_id=self.pad_id,
                      seed=seed, device=self.device, stop=self._stop_callback(stop, len(prompts)),
                      share_prefill=self.share_prefill, logits_mask=logits_mask)
        if version == BASE_VERSION:
            if self._peft is None:
                return sample_batch(self._base, prompts, **kwargs)
            with self._peft.disable_adapter():
                return sample_batch(self._peft, prompts, **kwargs)
        self._peft.set_adapter(served_name(name, version))
        return sample_batch(self._peft, prompts, **kwargs)

    def _stop_callback(self, stop: JsonObjectEnd | None, rows: int) -> Callable[[int, int], bool] | None:
        """``stop(row, token)`` for :func:`sample_batch`: True once the row's JSON object has closed."""
        if stop is None:
            return None
        scanners = [stop.scanner() for _ in range(rows)]
        decode = self.tokenizer.decode

        def callback(row: int, token: int) -> bool:
            # one token decoded alone: braces, quotes and backslashes are ASCII, so they come out
            # exactly; a token holding part of a multi-byte character decodes to U+FFFD (not structural)
            return scanners[row].feed(decode([token], skip_special_tokens=True)) is not None

        return callback

    # -- adapters ---------------------------------------------------------------------------------
    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:
        if version <= BASE_VERSION:
            raise AdapterLoadError(f"adapter versions start at 1 (0 is the base model), got {version}")
        if self._slots.is_resident(adapter_name, version):
            return  # immutable names: the same version is the same bytes
        name = served_name(adapter_name, version)
        with self._lock:
            try:
                if self._peft is None:
                    from peft import PeftModel

                    self._peft = PeftModel.from_pretrained(self._base, str(path), adapter_name=name,
                                                           is_trainable=False).eval()
                else:
                    self._peft.load_adapter(str(path), adapter_name=name, is_trainable=False)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise AdapterLoadError(f"cannot load adapter {name} from {path}: {exc}") from exc
            self._lean_adapters[(adapter_name, version)] = self._to_lean(name)
            self._slots.add(adapter_name, version)
            log.info("adapter %s resident (from %s)", name, path)
        self._evict(adapter_name)

    def unload_adapter(self, adapter_name: str, version: int) -> None:
        if version == BASE_VERSION:
            return
        with self._lock:
            # Checked under the lock: the loader thread (after a load) and a worker thread (after an
            # unpin) may both decide to evict the same version; the second must find it gone.
            if not self._slots.is_resident(adapter_name, version):
                return
            self._slots.remove(adapter_name, version)  # raises AdapterInUseError when pinned
            name = served_name(adapter_name, version)
            self._lean_adapters.pop((adapter_name, version), None)
            if self._fast is not None:
                self._fast.forget((adapter_name, version))
            if set(self._peft.peft_config) == {name}:
                # peft cannot serve with zero adapters: strip the LoRA layers, back to the plain base model
                self._base = self._peft.unload()
                self._peft = None
            else:
                self._peft.delete_adapter(name)
            log.info("adapter %s unloaded", served_name(adapter_name, version))

    def _to_lean(self, name: str) -> LeanAdapter | None:
        """The fast engine's copy of adapter ``name`` (None: it cannot run it; the eager engine will)."""
        if self._fast is None:
            return None
        try:
            return self._fast.lean.adapter_from_peft(self._peft, name)
        except ValueError as exc:
            log.warning("adapter %s runs on the eager engine: %s", name, exc)
            return None

    def resident_versions(self, adapter_name: str) -> list[int]:
        return self._slots.versions(adapter_name)

    def require_resident(self, adapter_name: str, version: int) -> None:
        """Raise :class:`AdapterNotResidentError` unless ``version`` can be served now."""
        if not self._slots.is_resident(adapter_name, version):
            raise AdapterNotResidentError(f"{served_name(adapter_name, version)} is not resident")


class LocalTextModel:
    """:class:`~.base.TextModel` over a :class:`LocalPolicy`'s weights with adapters disabled (no copy)."""

    def __init__(self, policy: LocalPolicy, *, seed: int | None = None) -> None:
        self.policy = policy
        self.seed = seed

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> str:
        prompt = self.policy.chat_prompt(messages)
        sampling = R.SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=max_tokens, seed=self.seed)
        (generation,) = self.policy.generate([prompt], sampling, adapter_name="base", adapter_version=BASE_VERSION)
        return generation.text

"""Policy model: a base causal LM with a trainable LoRA adapter (peft), QLoRA on CUDA only.

- :func:`load_policy` resolves the base model (:mod:`~streamgrpo.models.base`), wraps it with a new
  LoRA adapter or the stored one to resume, and prepares it for its precision
  (:mod:`~streamgrpo.trainer.precision`: bf16 compute with fp32 LoRA master weights where the device
  computes bf16 natively, fp32 elsewhere).
- 4-bit QLoRA imports ``bitsandbytes`` only inside the CUDA path; requesting it without CUDA is a
  :class:`ModelConfigError` saying what to change.
- :func:`token_logprobs` recomputes the behaviour quantity: ``log_softmax(logits / T)`` at each token
  over the FULL vocabulary (top-p only truncated sampling), with each row's own temperature ``T``,
  the output head in fp32 on the action positions only, and optionally each shared prompt prefix
  computed once (:mod:`~streamgrpo.trainer.prefix`).

The reference policy for the KL term is the same model with the adapter disabled
(``model.disable_adapter()``): no second copy of the weights.
Not covered: multi-GPU / FSDP, full fine-tuning, merging adapters into the base.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from streamgrpo.models.base import resolve_base_model
from streamgrpo.models.errors import BaseModelError
from streamgrpo.trainer import precision as P
from streamgrpo.trainer import prefix
from streamgrpo.trainer.errors import ModelConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """What :func:`load_policy` builds."""

    base_model: str = "smollm2-135m-instruct"
    cache_dir: Path | None = None
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = field(default=("q_proj", "k_proj", "v_proj", "o_proj"))
    load_in_4bit: bool = False
    device: str = "auto"
    precision: str = "auto"  #: see :mod:`~streamgrpo.trainer.precision`


def pick_device(device: str = "auto") -> torch.device:
    """``auto`` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _quantization_config() -> Any:
    if not torch.cuda.is_available():
        raise ModelConfigError(
            "load_in_4bit (QLoRA) needs a CUDA GPU and bitsandbytes; on CPU set load_in_4bit = false"
        )
    try:
        import bitsandbytes  # noqa: F401  (imported only on the GPU path)
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise ModelConfigError("load_in_4bit needs bitsandbytes: pip install 'streamgrpo[gpu]'") from exc
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
    )


def load_base(spec: ModelSpec) -> Any:
    """The base causal LM (no adapter), on its device: loaded in its compute dtype on GPU (memory), in
    fp32 on CPU (:func:`load_policy` then casts what :mod:`~streamgrpo.trainer.precision` says)."""
    from transformers import AutoModelForCausalLM

    device = pick_device(spec.device)
    dtype = P.resolve(spec.precision, device) if device.type == "cuda" else torch.float32
    kwargs: dict[str, Any] = {"dtype": dtype}
    if spec.load_in_4bit:
        kwargs["quantization_config"] = _quantization_config()
        kwargs["device_map"] = {"": device.index or 0}
    path = resolve_base_model(spec.base_model, spec.cache_dir)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except OSError as exc:
        raise BaseModelError(f"cannot load base model {spec.base_model!r} from {path}: {exc}") from exc
    if spec.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    else:
        model.to(device)  # type: ignore[arg-type]
    return model


def attach_lora(base: Any, spec: ModelSpec, adapter_dir: Path | None = None) -> Any:
    """Wrap ``base`` with a fresh LoRA adapter, or the one stored in ``adapter_dir`` (trainable)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)
    config = LoraConfig(
        r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
        target_modules=list(spec.target_modules), task_type="CAUSAL_LM", bias="none",
    )
    return get_peft_model(base, config)


def load_policy(spec: ModelSpec, adapter_dir: Path | None = None) -> Any:
    """Base model + LoRA (new, or resumed from ``adapter_dir``) -> a ``peft.PeftModel`` in train mode,
    prepared for ``spec.precision`` (frozen decoder weights in the compute dtype, the rest fp32)."""
    model = attach_lora(load_base(spec), spec, adapter_dir)
    device = pick_device(spec.device)
    dtype = P.resolve(spec.precision, device)
    P.prepare_for_training(model, dtype)
    log.info("trainer precision %s: compute in %s (%s), LoRA weights and optimizer state in fp32", spec.precision,
             str(dtype).removeprefix("torch."), P.reason(spec.precision, device))
    model.train()
    return model


def token_logprobs(model: Any, input_ids: Tensor, attention_mask: Tensor, temperature: float | Tensor,
                   only: Tensor | None = None, share_prefix: bool = False,
                   grammar_bits: Tensor | None = None) -> Tensor:
    """(B, T) long, (B, T) long -> (B, T) float32: ``log_softmax(logits / temperature)`` of each token
    given the previous ones, over the full vocabulary; position 0 (no context) is 0. Rows are right-padded.

    ``temperature``: one for every row, or a (B,) tensor (each row recomputed with its own sample's).
    The forward runs in the model's compute dtype (:func:`~streamgrpo.trainer.precision.compute_context`).
    ``only`` ((B, T) bool, e.g. the action mask): compute just those tokens (0 elsewhere). The output
    head then runs, in fp32, on the hidden states of the positions that predict them, instead of
    producing ``(B, T, V)`` logits for every prompt token (a 49k vocabulary over 500-token prompts is
    most of the memory and a sixth of the FLOPs of a 135M model). Same values within float rounding.
    ``share_prefix`` (with ``only``): compute each prompt prefix that several rows share once
    (:mod:`~streamgrpo.trainer.prefix`); same values and gradients within float rounding.
    ``grammar_bits`` ((B, A, W) int32, with ``only``; see ``batching.Batch``): row ``b``'s ``j``-th ``only``
    token is normalised over the tokens allowed by ``grammar_bits[b, j]`` (the others' logits are -inf
    before the log-softmax), as a grammar-constrained sampler recorded it.
    """
    temps = _row_temperatures(temperature, input_ids)  # (B,)
    constrained = grammar_bits is not None and grammar_bits.numel() > 0
    if constrained and only is None:
        raise ValueError("grammar_bits needs `only` (the action mask it is aligned with)")
    split = _decoder_and_head(model) if only is not None else None
    with P.compute_context(model):
        if split is None and constrained:
            assert only is not None and grammar_bits is not None
            wanted = only[:, 1:].bool()
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1][wanted]  # (N, V)
            logits = _allowed_only(logits.float() / temps[wanted.nonzero()[:, 0]][:, None], grammar_bits, wanted)
            picked = logits.gather(-1, input_ids[:, 1:][wanted][:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
            logp = torch.zeros(wanted.shape, dtype=picked.dtype, device=picked.device).masked_scatter(wanted, picked)
            return torch.nn.functional.pad(logp, (1, 0))
        if split is None:
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
            logits = logits[:, :-1].float() / temps[:, None, None]
            targets = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
            picked = torch.gather(logits, -1, targets).squeeze(-1)  # (B, T-1)
            logp = picked - torch.logsumexp(logits, dim=-1)
            if only is not None:
                logp = logp * only[:, 1:]
            return torch.nn.functional.pad(logp, (1, 0))
        assert only is not None
        decoder, head = split
        wanted = only[:, 1:].bool()  # token t is predicted at position t - 1
        if share_prefix and prefix.supported(decoder):
            hidden = _shared_prefix_hidden(decoder, input_ids, attention_mask, wanted)  # (N, H)
        else:
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1][wanted]
        with P.full_precision(input_ids.device):
            head_dtype = next(head.parameters()).dtype
            row_temps = temps[wanted.nonzero()[:, 0]]  # (N,)
            logits = head(hidden.to(head_dtype)).float() / row_temps[:, None]  # (N, V)
            if constrained:
                assert grammar_bits is not None
                logits = _allowed_only(logits, grammar_bits, wanted)
            targets = input_ids[:, 1:][wanted]
            picked = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (N,)
    logp = torch.zeros(wanted.shape, dtype=picked.dtype, device=picked.device).masked_scatter(wanted, picked)
    return torch.nn.functional.pad(logp, (1, 0))


def _allowed_only(logits: Tensor, grammar_bits: Tensor, wanted: Tensor) -> Tensor:
    """``(N, V)`` logits of the ``wanted`` ((B, T-1) bool) positions, row-major, with the tokens that
    ``grammar_bits`` ((B, A, W)) disallows at each set to -inf (a row's j-th wanted position <- bits[b, j])."""
    from streamgrpo.models.grammar import unpack

    counts = wanted.sum(dim=1)  # (B,)
    if int(counts.max()) > grammar_bits.shape[1]:
        raise ValueError(f"grammar_bits cover {grammar_bits.shape[1]} action tokens, a row has {int(counts.max())}")
    aligned = torch.arange(grammar_bits.shape[1], device=counts.device)[None] < counts[:, None]  # (B, A)
    allowed = unpack(grammar_bits.to(logits.device)[aligned.to(logits.device)], logits.shape[-1])  # (N, V)
    return logits.masked_fill(~allowed, float("-inf"))


def _row_temperatures(temperature: float | Tensor, input_ids: Tensor) -> Tensor:
    """(B,) float32 temperatures on the device of ``input_ids``."""
    rows = input_ids.shape[0]
    if isinstance(temperature, Tensor):
        if temperature.shape != (rows,):
            raise ValueError(f"temperature must be a float or a ({rows},) tensor, got shape {tuple(temperature.shape)}")
        return temperature.to(device=input_ids.device, dtype=torch.float32)
    return torch.full((rows,), float(temperature), dtype=torch.float32, device=input_ids.device)


def _shared_prefix_hidden(decoder: Any, input_ids: Tensor, attention_mask: Tensor, wanted: Tensor) -> Tensor:
    """(N, H): the decoder's last hidden states at the ``wanted`` ((B, T-1) bool) positions, row-major,
    with each prompt prefix shared by several rows computed once."""
    lengths = [int(n) for n in attention_mask.sum(dim=1).tolist()]
    positions = [torch.nonzero(wanted[b]).squeeze(-1) for b in range(wanted.shape[0])]
    limits = [int(p[0]) if len(p) else lengths[b] - 1 for b, p in enumerate(positions)]
    seqs = [input_ids[b, :lengths[b]].tolist() for b in range(input_ids.shape[0])]
    parts = prefix.forward(decoder, input_ids, lengths, prefix.plan(seqs, limits))
    picked = []
    for b, p in enumerate(positions):
        start, hidden = parts[b]
        picked.append(hidden[p - start])
    return torch.cat(picked)


def _decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """(decoder, output head) of a plain causal LM (a peft wrapper is looked through: LoRA layers sit
    inside the decoder, so ``disable_adapter()`` still applies); None where the causal-LM forward does
    more than ``head(last_hidden_state)`` (final logit soft-capping, logit scaling) or the parts are
    not exposed: the caller then takes the full-logits path."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is None or getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    try:
        decoder, head = base.get_decoder(), base.get_output_embeddings()
    except (AttributeError, ValueError, NotImplementedError):
        return None
    if decoder is None or head is None or decoder is base:
        return None
    return decoder, head

"""Training precision: bf16 compute with fp32 LoRA master weights and fp32 optimizer state, or fp32.

Settings (``precision``, registry :data:`PRECISIONS`):
- ``auto`` (default): bf16 on a CUDA GPU that supports it, and on a CPU with AMX tiles
  (:func:`~streamgrpo.models.numerics.fast_bf16`: the same rule as the rollout policy's
  ``dtype=auto``, so sampler and trainer compute in the same dtype); fp32 everywhere else. A CPU with
  AVX512-BF16 but no AMX gets fp32: bf16 products run at about half fp32's rate there, and a
  SmolLM2 step took 13.2 s in bf16 against 8.5 s in fp32 (``bench/bench_trainer_step.py``).
- ``bf16``: bf16 compute wherever asked (on a CPU without AMX it runs, slower).
- ``fp32``: everything fp32 (the path before; the reference the bf16 path is tested against).

What bf16 means here (:func:`prepare_for_training`): the FROZEN base weights of the decoder's linear
layers are stored in bf16 (half the memory, no per-step cast); the trainable LoRA weights, the
embeddings, the norms and the output head stay fp32, so the optimizer (built over the LoRA weights)
keeps fp32 master weights and fp32 Adam moments. The forward runs under ``torch.autocast(bf16)``
(:func:`compute_context`): every matmul in bf16, the residual stream in fp32 (the embeddings are
fp32), and the output head is run in fp32 by :func:`~streamgrpo.trainer.model.token_logprobs` (on the
action positions only, ~2% of the FLOPs), so log-probs are not rounded to bf16 logits. bf16 has
fp32's exponent range, so no loss scaling is needed.

Not covered: fp16 (needs loss scaling), fp8, QLoRA's own compute dtype (bitsandbytes sets it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from streamgrpo.models.numerics import fast_bf16
from streamgrpo.trainer.errors import ModelConfigError


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 matmuls natively AND faster than fp32."""
    return fast_bf16(device)[0]


def _auto(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if native_bf16(device) else torch.float32


#: precision setting -> the compute dtype it gives on a device
PRECISIONS: dict[str, Callable[[torch.device], torch.dtype]] = {
    "auto": _auto,
    "bf16": lambda device: torch.bfloat16,
    "fp32": lambda device: torch.float32,
}


def reason(precision: str, device: torch.device) -> str:
    """Why ``precision`` gives the dtype it gives on ``device`` (for the start-up log)."""
    return fast_bf16(device)[1] if precision == "auto" else "set explicitly"


def resolve(precision: str, device: torch.device) -> torch.dtype:
    """The compute dtype of ``precision`` on ``device``; raises :class:`ModelConfigError` naming the choices."""
    try:
        return PRECISIONS[precision](device)
    except KeyError:
        raise ModelConfigError(f"precision {precision!r} is not one of {sorted(PRECISIONS)}") from None


def prepare_for_training(model: Any, dtype: torch.dtype) -> Any:
    """Frozen weights of the decoder's linear layers in ``dtype``; every other frozen floating weight
    (embeddings, norms, the output head) and every trainable one in fp32. In place; returns ``model``.
    Quantized (4-bit) weights are left as they are."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    head_params = {id(p) for p in head.parameters()} if head is not None else set()
    linear_params = {id(p) for m in base.modules() if isinstance(m, torch.nn.Linear)
                     for p in m.parameters(recurse=False)}
    # old id -> (old, new): tied weights (embeddings = head) stay one parameter; holding the old one keeps its id unique
    replaced: dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}
    for module in base.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.is_floating_point():
                continue
            frozen_linear = not param.requires_grad and id(param) in linear_params and id(param) not in head_params
            want = dtype if frozen_linear else torch.float32
            if id(param) not in replaced and param.dtype != want:
                new = torch.nn.Parameter(param.detach().to(want), requires_grad=param.requires_grad)
                replaced[id(param)] = (param, new)
            if id(param) in replaced:
                setattr(module, name, replaced[id(param)][1])
    return model


def compute_dtype(model: Any) -> torch.dtype:
    """The dtype the model computes in: that of its frozen decoder linear weights (fp32 when all are fp32;
    bf16 for a 4-bit quantized base, whose bitsandbytes compute dtype is bf16)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for module in base.modules():
        if isinstance(module, torch.nn.Linear) and not module.weight.requires_grad:
            dtype = module.weight.dtype
            return dtype if dtype.is_floating_point else torch.bfloat16
    return torch.float32


@contextlib.contextmanager
def compute_context(model: Any) -> Iterator[None]:
    """Autocast to the model's compute dtype when it is not fp32 (forward passes only; run backward outside)."""
    dtype = compute_dtype(model)
    if dtype == torch.float32:
        yield
        return
    device = next(model.parameters()).device
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


@contextlib.contextmanager
def full_precision(device: torch.device) -> Iterator[None]:
    """Autocast off (inside :func:`compute_context`): for the output head and the log-softmax."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield

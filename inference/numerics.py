"""Which dtype the local policy samples in, and the ``engine`` label recorded with every action.

``dtype="auto"`` (the default) picks bfloat16 only where bf16 matrix products are FAST on the
device, and float32 everywhere else:

- CUDA: bfloat16 when the GPU supports it (``torch.cuda.is_bf16_supported()``), else float32.
- CPU: bfloat16 when the CPU has AMX tiles (:func:`~streamgrpo.models.numerics.fast_bf16`, the
  rule the trainer's ``precision=auto`` uses too). AVX-512-BF16 alone is NOT enough: on a 2-core
  AVX-512-BF16 VM without AMX, oneDNN's bf16 matmul ran at 50-75 GFLOP/s against 70-130 for
  float32 (404x576x3072, 1-2 threads), so bf16 would be slower there and only cost accuracy.

The choice is recorded per action as ``PlannerAction.engine`` (e.g. ``"local/bfloat16"``): a
bf16-sampled action's behaviour logprobs differ from an fp32 recomputation by ~0.03 on average
(max ~0.15 on SmolLM2), which the trainer corrects for (truncated importance sampling) only if it
knows.

What is covered: the decision and its reason (logged once at start). What is not: measuring the
device (the rule is a feature check, deterministic and free; ``bench/bench_generation.py``
measures both dtypes side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from streamgrpo.inference.errors import PolicyError
from streamgrpo.models.numerics import fast_bf16

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Accepted values of the ``dtype`` setting.
DTYPE_CHOICES = ("auto", *DTYPES)


@dataclass(frozen=True)
class DtypeChoice:
    """The resolved dtype, its name and why it was picked (for the start-up log)."""

    dtype: torch.dtype
    name: str
    reason: str


def resolve_dtype(setting: str, device: torch.device | str) -> DtypeChoice:
    """``"auto" | "float32" | "bfloat16" | "float16"`` on ``device`` -> the dtype to load and sample in."""
    if setting in DTYPES:
        return DtypeChoice(DTYPES[setting], setting, "set explicitly")
    if setting != "auto":
        raise PolicyError(f"dtype {setting!r} is not one of {list(DTYPE_CHOICES)}")
    fast, why = fast_bf16(device)
    return DtypeChoice(torch.bfloat16 if fast else torch.float32, "bfloat16" if fast else "float32", why)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the names the settings use)."""
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def engine_label(backend: str, dtype: torch.dtype) -> str:
    """The ``PlannerAction.engine`` value: ``"local/float32"``, ``"local/bfloat16"``..."""
    return f"{backend}/{dtype_name(dtype)}"

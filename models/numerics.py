"""Whether bf16 matrix products are FAST on a device: the one rule the rollout policy's ``dtype=auto`` and
the trainer's ``precision=auto`` share (:func:`fast_bf16`), so a sampler and a trainer on the same machine
pick the same dtype.

- CUDA: when the GPU supports bf16 (``torch.cuda.is_bf16_supported()``).
- CPU (:func:`cpu_has_fast_bf16`):
  - AMX tiles usable by this process (``torch.cpu._is_amx_tile_supported()``, which also checks that the
    kernel lets the process use them): yes, bf16 products run several times float32's speed.
  - AVX-512-BF16 alone: NO. On this project's 2-core AVX-512-BF16 VM without AMX, torch 2.13's bf16
    matmul ran at about half float32's rate (2048^2: 149 vs 311 GFLOP/s, 2 threads; 404x576x3072: 50-75
    vs 70-130, 1-2 threads), and a trainer step in bf16 took 13.2 s against 8.5 s in float32
    (``bench/bench_trainer_step.py``).
  - Neither: no.
- Any other device type: no.

What is covered: the feature checks (deterministic and free). What is not: measuring the device at start.
"""

from __future__ import annotations

import torch


def cpu_has_fast_bf16() -> tuple[bool, str]:
    """(fast, why): AMX tiles usable by this process -> bf16 matmuls several times float32's speed."""
    amx = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    if amx:
        return True, "CPU has AMX tiles"
    avx = bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())
    if avx:
        return False, "CPU has AVX-512-BF16 but no usable AMX (bf16 matmuls measured slower than float32)"
    return False, "CPU has neither AMX nor AVX-512-BF16"


def fast_bf16(device: torch.device | str) -> tuple[bool, str]:
    """(fast, why) for ``device``: the rule both ``auto`` settings resolve with."""
    kind = torch.device(device).type
    if kind == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return True, "GPU supports bf16"
        return False, "GPU without bf16 support"
    if kind == "cpu":
        return cpu_has_fast_bf16()
    return False, f"no bf16 rule for device type {kind!r}"

"""oneDNN-packed weights for the CPU products of the lean forward (the ONE place private torch ops are used).

A product ``x @ W`` with a plain weight makes oneDNN/MKL re-block ``W`` on every call; a weight
packed once (``torch.ops.mkldnn._reorder_linear_weight``, applied with
``torch.ops.mkldnn._linear_pointwise``) skips that. These are the ops torch's own compiler
(inductor's CPU weight prepacking) emits; they are not public API, so:

- :func:`pack` is used only on CPU builds with oneDNN, and checks its result against the plain
  product on a probe before it is trusted; on any failure it returns None and the caller keeps
  the plain product (with a log line once);
- ``tests/unit/inference/test_policy_packing.py`` fails if a torch upgrade changes their behaviour.

Measured on the 2-core AVX-512 CPU here (M = 8 rows, float32): the 576 x 49152 output head
1.2-1.5x faster packed than ``x @ W.T``; the layer products (576 x <= 3072) were NOT faster packed
in float32, so only the head is packed in float32. In bfloat16 every product is packed (oneDNN is
then the only fast path, and AMX CPUs need packed weights).

What is covered: packing and the probe. What is not: GPUs (plain products there).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
_warned = False


class PackedLinear:
    """``x @ W.T`` with ``W (out, in)`` packed once; call it with ``x (M, in)`` -> ``(M, out)``."""

    def __init__(self, packed: torch.Tensor, out_features: int) -> None:
        self.packed = packed
        self.out_features = out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def pack(weight: torch.Tensor, rows_hint: int = 8) -> PackedLinear | None:
    """A :class:`PackedLinear` for ``weight (out, in)``, or None where packing is unavailable or wrong."""
    global _warned
    if weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16) \
            or not torch.backends.mkldnn.is_available():
        return None
    try:
        packed = PackedLinear(torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows_hint),
                              int(weight.shape[0]))
        probe = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
        expected = (probe @ weight.t()).float()
        got = packed(probe).float()
        tolerance = 1e-4 if weight.dtype == torch.float32 else 2e-2
        if got.shape != expected.shape or not torch.allclose(got, expected, rtol=tolerance,
                                                             atol=tolerance * float(expected.abs().max())):
            raise RuntimeError("packed product differs from the plain one")
    except (RuntimeError, AttributeError, NotImplementedError) as exc:
        if not _warned:
            log.warning("oneDNN weight packing unavailable (%s); using plain products", exc)
            _warned = True
        return None
    return packed

"""Canary for the private oneDNN ops of :mod:`streamgrpo.inference.packing`: fails if a torch upgrade
changes them (then the engine would silently fall back to plain products -- slower, still correct)."""

from __future__ import annotations

import pytest
import torch

from streamgrpo.inference.packing import pack


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_packed_product_equals_the_plain_one_for_any_row_count(dtype: torch.dtype, tolerance: float) -> None:
    weight = torch.randn(300, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    packed = pack(weight, rows_hint=8)
    assert packed is not None, "oneDNN packing stopped working with this torch version"
    for rows in (1, 3, 8, 17):
        x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rows)).to(dtype)
        expected = (x.float() @ weight.float().t())
        assert torch.allclose(packed(x).float(), expected, rtol=tolerance, atol=tolerance * float(expected.abs().max()))


def test_weights_it_cannot_pack_are_left_to_plain_products() -> None:
    assert pack(torch.randn(4, 4, dtype=torch.float64)) is None

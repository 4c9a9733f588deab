"""The trainer's GPU paths run for real on a CUDA machine: a bf16 step and a QLoRA (4-bit, bitsandbytes) step.

    python bench/gpu_check.py --out gpu_check.json

On a small Llama built in-process (hidden 256, 4 layers, saved to a temporary directory and loaded back through
the product's own ``load_policy`` as ``base_model``), for each path:
- ``bf16``: ``precision = "auto"`` on CUDA must resolve to bfloat16 (:mod:`streamgrpo.trainer.precision`); the
  frozen decoder weights are bf16, LoRA weights fp32;
- ``qlora``: ``load_in_4bit = true``: the frozen linear layers are bitsandbytes ``Linear4bit`` (nf4), LoRA fp32;
then ONE ``optimizer_step`` (GRPO loss, the trainer's own code) on a realistic batch (16 rows of 300 prompt +
24 action tokens; behaviour log-probs recomputed by the same model, so every importance weight starts at 1):
the loss is finite, the LoRA parameters change, the base weights do not, and the step's recomputed log-probs
match the behaviour ones (``max_abs_log_ratio``). The fp32 CUDA step is the baseline each is compared with
(log-prob gap to fp32 on the same batch). Prints one JSON object (and writes it to --out).

    python bench/gpu_check.py --smollm2-shape --repeats 5

times the same three paths on a random model of SmolLM2-135M's architecture (no weights needed): the first step
warms up, then ``--repeats`` steps are timed (``step_s``, sorted), fp32 being the same-run baseline.

Needs: CUDA, transformers, peft, and bitsandbytes for the qlora path (``pip install 'streamgrpo[gpu]'``).
Not covered: vLLM on a GPU (its server is the same code as on CPU, ``inference/vllm_server.py``), multi-GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def small_llama(path: Path, smollm2_shape: bool = False) -> int:
    """A random Llama saved to ``path``; ``smollm2_shape``: SmolLM2-135M's architecture (timings), else a
    small one (the checks). Returns its vocabulary size."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if smollm2_shape:
        config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                             num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                             pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    else:
        config = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024,
                             pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(path))
    return int(config.vocab_size)


def batch_rows(seed: int = 1, vocab: int = 4096) -> list[Any]:
    """16 rows = 4 rollouts x 4 turns: a shared 300-token prompt + 24 action tokens each (the default
    trainer step's shape: samples_per_step 8 rollouts of ~3 turns is about as many rows)."""
    from streamgrpo.trainer.batching import Row

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, vocab, (300,), generator=g).tolist()  # a shared system prompt + question
    rows = []
    for i in range(16):
        action = torch.randint(3, vocab, (24,), generator=g).tolist()
        rows.append(Row(tuple(prompt + action), len(prompt), tuple([0.0] * 24), 1.0 if i % 2 else -1.0, i // 4, 0))
    return rows


def one_path(base: Path, precision: str, four_bit: bool, device: str = "cuda", vocab: int = 4096,
             repeats: int = 1) -> dict[str, Any]:
    from streamgrpo.trainer.batching import collate, micro_batches, with_weights
    from streamgrpo.trainer.losses import LossConfig, build_loss
    from streamgrpo.trainer.model import ModelSpec, load_policy, token_logprobs
    from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

    started = time.perf_counter()
    spec = ModelSpec(base_model=str(base), device=device, precision=precision, load_in_4bit=four_bit)
    model = load_policy(spec)
    frozen = {n: str(p.dtype) for n, p in model.named_parameters() if not p.requires_grad}
    kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__})
    batch = collate(batch_rows(vocab=vocab), pad_id=0)
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids.to(device), batch.attention_mask.to(device), 1.0,
                              only=batch.action_mask.to(device)).float().cpu()
    rows = [r.__class__(r.input_ids, r.prompt_len, tuple(logp[i, r.prompt_len:r.prompt_len + 24].tolist()),
                        r.advantage, r.rollout, r.behaviour_version) for i, r in enumerate(batch_rows(vocab=vocab))]
    batch = with_weights(collate(rows, pad_id=0), 4, "rollout_mean", 64)
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    probe = next(n for n, p in model.named_parameters() if not p.requires_grad and p.dtype.is_floating_point)
    base_before = dict(model.named_parameters())[probe].detach().clone()
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(), max_grad_norm=1.0)
    optimizer = build_optimizer(model, 1e-3)
    metrics = optimizer_step(model, optimizer, None, micro_batches(batch, 4096), cfg)
    step_s = []
    for _ in range(repeats):  # timed steps after the first (warm-up) one; the LoRA changes go on
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        optimizer_step(model, optimizer, None, micro_batches(batch, 4096), cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
    changed = sum(not torch.equal(lora_before[n], p.detach()) for n, p in model.named_parameters() if p.requires_grad)
    if device == "cuda":
        torch.cuda.synchronize()
    return {
        "precision": precision, "load_in_4bit": four_bit, "linear_kinds": kinds,
        "frozen_dtypes": sorted(set(frozen.values())),
        "lora_dtypes": sorted({str(p.dtype) for p in model.parameters() if p.requires_grad}),
        "loss": metrics["loss"], "loss_finite": bool(torch.isfinite(torch.tensor(metrics["loss"]))),
        "lora_tensors_changed": int(changed), "lora_tensors": len(lora_before),
        "base_unchanged": bool(torch.equal(base_before, dict(model.named_parameters())[probe].detach())),
        "max_abs_log_ratio_v0": metrics.get("max_abs_log_ratio_v0"), "max_lora_b": metrics.get("max_lora_b"),
        "behaviour_logp": logp, "seconds": round(time.perf_counter() - started, 2),
        "step_s": sorted(round(x, 4) for x in step_s),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if device == "cuda" else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    ap.add_argument("--skip-qlora", action="store_true", help="only the bf16 and fp32 paths")
    ap.add_argument("--device", default="cuda", help="cuda (the check), or cpu to try the script itself (no qlora)")
    ap.add_argument("--smollm2-shape", action="store_true", help="a random model of SmolLM2-135M's architecture "
                    "(no weights needed) and --repeats timed optimizer steps per path")
    ap.add_argument("--repeats", type=int, default=0, help="timed optimizer steps per path after the first")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False); --device cpu tries the script")
    from streamgrpo.trainer import precision as P

    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    result: dict[str, Any] = {"torch": torch.__version__, "device": name,
                              "auto_precision": str(P.resolve("auto", torch.device(args.device))), "paths": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "llama"
        vocab = small_llama(base, args.smollm2_shape)
        runs = [("fp32", "fp32", False), ("bf16", "auto", False)]
        if not args.skip_qlora and args.device == "cuda":
            runs.append(("qlora", "auto", True))
        for label, precision, four_bit in runs:
            try:
                result["paths"][label] = one_path(base, precision, four_bit, args.device, vocab, args.repeats)
            except Exception as exc:  # noqa: BLE001 - a check script reports every path's failure and goes on
                result["paths"][label] = {"error": f"{type(exc).__name__}: {exc}"}
            if args.device == "cuda":
                torch.cuda.empty_cache()
    ref = result["paths"].get("fp32", {}).get("behaviour_logp")
    for path in result["paths"].values():
        logp = path.pop("behaviour_logp", None)
        if ref is not None and logp is not None:
            mask = ref != 0
            path["logp_gap_to_fp32_max"] = float((logp - ref).abs()[mask].max())
            path["logp_gap_to_fp32_mean"] = float((logp - ref).abs()[mask].mean())
    try:
        import bitsandbytes

        result["bitsandbytes"] = bitsandbytes.__version__
    except ImportError:
        result["bitsandbytes"] = None
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

"""`evaluate` on a tiny in-process model: an adapter trained to answer correctly scores higher than its
base, through the real agent loop, correctness judge and adapter loading from a directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.tiny_policy import build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.evaluation.adapters import from_dir
from streamgrpo.evaluation.core import paired_difference
from streamgrpo.evaluation.judging import CorrectnessJudge
from streamgrpo.evaluation.runner import EvalSpec, _requests, evaluate
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import run_groups
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.tasks.datasets import TaskRow

TASKS = [TaskRow(question=q, ground_truths=["7"], source="builtin", metadata={"kind": "arithmetic"})
         for q in ("What is 3 plus 4?", "What is 10 minus 3?", "Add 5 and 2.", "What is 14 divided by 2?",
                   "How much is 1 + 6?", "Compute 49 / 7.")]
SPEC = EvalSpec(task_set="tiny", max_new_tokens=24, max_turns=2, batch_size=3)


def tiny_model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def context(model: torch.nn.Module, tok) -> object:  # type: ignore[no-untyped-def]
    cfg = RolloutConfig(tools=ToolsSettings(enabled=["calculator"]))
    return build_context(cfg, LocalPolicy.from_model(model, tok))


def first_prompts(ctx, tasks) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The planner's turn-1 prompt of every task, as the loop builds it (prefix '{"' included)."""
    prompts: dict[str, list[int]] = {}

    def sink(event: R.Event) -> None:
        if isinstance(event, R.PlannerAction) and event.envelope.turn == 1:
            prompts[str(event.envelope.task_id)] = list(event.prompt_token_ids)

    groups = _requests(tasks, SPEC, "tiny", "planner", 0)
    run_groups(groups, ctx, sink)
    return [prompts[str(g[0].envelope.task_id)] for g in groups]


def train_adapter(model: torch.nn.Module, tok, prompts: list[list[int]], out: Path) -> None:  # type: ignore[no-untyped-def]
    """Supervised LoRA: every prompt -> 'answer": "7"}' (the forced prefix '{"' is in the prompt)."""
    from peft import LoraConfig, get_peft_model

    target = tok.encode('answer": "7"}', add_special_tokens=False) + [tok.eos_token_id]
    # a random 2-layer model learns the mapping quickly only with its output head trainable too
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], modules_to_save=["lm_head"])
    peft_model = get_peft_model(model, config)
    opt = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    width = max(len(p) for p in prompts) + len(target)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # right-padded rows; the loss reads each row's target positions
        ids[i, :len(p) + len(target)] = torch.tensor(p + target)
        mask[i, :len(p) + len(target)] = 1
    rows = torch.arange(len(prompts))[:, None]
    cols = torch.tensor([[len(p) - 1 + j for j in range(len(target))] for p in prompts])
    labels = torch.tensor([target] * len(prompts))
    peft_model.train()
    for _ in range(150):
        opt.zero_grad()
        logits = peft_model(input_ids=ids, attention_mask=mask).logits[rows, cols]  # (B, len(target), V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
    peft_model.save_pretrained(str(out))
    peft_model.unload()  # the base weights stay untouched for the evaluation of v0


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, object, Path]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster and never stalls on a busy machine
    try:
        return _trained(tmp_path_factory)
    finally:
        torch.set_num_threads(threads)


def _trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, object, Path]:
    tok = build_tiny_tokenizer()
    model = tiny_model()
    prompts = first_prompts(context(tiny_model(), tok), TASKS)
    out = tmp_path_factory.mktemp("adapter") / "planner-v1"
    train_adapter(model, tok, prompts, out)
    return tiny_model(), tok, out  # a fresh base with the same seed = the untouched base weights


def test_an_adapter_trained_to_answer_scores_higher_than_its_base(trained) -> None:  # type: ignore[no-untyped-def]
    model, tok, adapter_dir = trained
    ctx = context(model, tok)
    judge = CorrectnessJudge(JudgeSettings())
    base = evaluate(ctx, TASKS, SPEC, judge, adapter_name="planner", version=0)
    target = from_dir(adapter_dir, "planner")
    ctx.policy.load_adapter("planner", target.version, target.path)
    tuned = evaluate(ctx, TASKS, SPEC, judge, adapter_name="planner", version=target.version)

    assert base.summary.accuracy == 0.0, base.answers
    assert tuned.summary.accuracy == 1.0, tuned.answers
    assert tuned.summary.answered_rate == 1.0 and tuned.summary.parse_failure_rate == 0.0
    assert tuned.summary.ci_low > base.summary.ci_high  # the intervals separate at n = 6
    diff = paired_difference(base.outcomes, tuned.outcomes)
    assert diff.mean == 1.0 and diff.b_only == len(TASKS)
    event = tuned.event(judge.info)
    assert (event.adapter_version, event.accuracy, event.tasks, event.trigger) == (1, 1.0, 6, "cli")
    assert event.task_set_hash == base.task_hash

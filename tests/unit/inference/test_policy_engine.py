"""The fast engine: continuous batching across calls and adapters, prefix reuse, error isolation, RowCache."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.base import Generation
from streamgrpo.inference.engine import EngineRequest, FastEngine
from streamgrpo.inference.kvcache import CachedPrefix, PrefixStore, RowCache
from streamgrpo.inference.lean import LeanLlama
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.rollout.loop import LoopContext, run_group
from streamgrpo.rollout.tools.calculator import Calculator

from .test_policy_local import MESSAGES, fresh_logprobs, save_lora


def max_gap(gen: Generation, model: torch.nn.Module, temperature: float) -> float:
    return max(abs(a - b) for a, b in zip(gen.logprobs, fresh_logprobs(model, gen, temperature), strict=True))


def request(prompts: list[list[int]], seed: int, max_new_tokens: int = 10, **kw: object) -> EngineRequest:
    return EngineRequest(prompts=prompts, temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens,
                         eos_ids=frozenset(), seed=seed, **kw)  # type: ignore[arg-type]


def test_concurrent_calls_share_decode_steps_and_each_matches_a_fresh_forward() -> None:
    model = build_tiny_model(seed=1)
    engine = FastEngine(LeanLlama(model))
    a, b = [10, 11, 12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27]
    try:
        with engine._state:  # hold the engine between iterations: both jobs are pending together
            first = engine.submit(request([a, a, a], seed=1))
            second = engine.submit(request([b, a], seed=2))
        rows = first.result(timeout=60) + second.result(timeout=60)
    finally:
        engine.close()
    assert engine.stats.max_rows == 5  # one decode step served both calls
    for prompt, row in zip([a, a, a, b, a], rows, strict=True):
        assert len(row.token_ids) == 10
        ids = torch.tensor([prompt + row.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        fresh = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(row.token_ids)[:, None])
        assert torch.allclose(fresh.squeeze(-1), torch.tensor(row.logprobs), atol=1e-4)


def test_seeded_job_samples_the_same_alone_or_beside_another_job() -> None:
    engine = FastEngine(LeanLlama(build_tiny_model(seed=2)))
    prompt = [5, 6, 7, 8, 9, 10]
    try:
        alone = engine.generate(request([prompt] * 3, seed=9))
        with engine._state:
            paired = engine.submit(request([prompt] * 3, seed=9))
            other = engine.submit(request([[30, 31, 32]] * 2, seed=4, max_new_tokens=4))
        together = paired.result(timeout=60)
        other.result(timeout=60)
    finally:
        engine.close()
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert max(abs(x - y) for r, s in zip(alone, together, strict=True) for x, y in zip(r.logprobs, s.logprobs,
                                                                                       strict=True)) < 1e-5


def test_rows_of_different_adapter_versions_decode_together_each_with_its_own_weights(tmp_path: Path) -> None:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    policy.load_adapter("planner", 1, save_lora(tmp_path, seed=1))
    prompt = policy.chat_prompt(MESSAGES[1])
    sampling = R.SamplingParams(temperature=0.8, max_new_tokens=16, seed=5)
    out: dict[int, list[Generation]] = {}
    assert policy._fast is not None
    try:
        with policy._fast._state:  # the engine waits between iterations until both calls are submitted
            threads = [threading.Thread(target=lambda v=v: out.__setitem__(v, policy.generate(
                [prompt] * 2, sampling, adapter_name="planner", adapter_version=v))) for v in (0, 1)]
            for t in threads:
                t.start()
            while policy._fast.stats.submitted < 2:
                threading.Event().wait(0.01)
        for t in threads:
            t.join(timeout=60)
    finally:
        policy.close()
    assert policy._fast.stats.max_rows == 4
    assert out[1][0].logprobs != out[0][0].logprobs
    policy._peft.set_adapter("planner@v1")
    assert all(max_gap(g, policy._peft, 0.8) < 1e-4 for g in out[1])
    with policy._peft.disable_adapter():
        assert all(max_gap(g, policy._peft, 0.8) < 1e-4 for g in out[0])


def test_a_stored_prefix_is_reused_by_the_next_call_and_logprobs_stay_exact() -> None:
    model = build_tiny_model(seed=3)
    policy = LocalPolicy.from_model(model, build_tiny_tokenizer(), prefix_cache_tokens=1024)
    system = {"role": "system", "content": "You plan the steps of a tool-using assistant. Reply with JSON."}
    first = policy.chat_prompt([system, {"role": "user", "content": "What is 6 times 7?"}])
    second = policy.chat_prompt([system, {"role": "user", "content": "Who invented the loom?"}])
    sampling = R.SamplingParams(temperature=1.0, max_new_tokens=12, seed=1)
    try:
        policy.generate([first] * 2, sampling, adapter_name="p", adapter_version=0)
        assert policy._fast is not None and policy._fast.stats.reused_prefix_tokens == 0
        gens = policy.generate([second] * 3, sampling, adapter_name="p", adapter_version=0)
    finally:
        policy.close()
    shared = next(i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y)
    assert policy._fast.stats.reused_prefix_tokens == shared  # the system prompt was not recomputed
    assert all(max_gap(g, model, 1.0) < 1e-4 for g in gens)


def test_a_failing_stop_callback_fails_its_own_call_only() -> None:
    engine = FastEngine(LeanLlama(build_tiny_model()))

    def explode(row: int, token: int) -> bool:
        raise RuntimeError("callback bug")

    try:
        with engine._state:
            bad = engine.submit(request([[5, 6, 7]] * 2, seed=1, stop=explode))
            good = engine.submit(request([[8, 9, 10]] * 2, seed=2))
        with pytest.raises(RuntimeError, match="callback bug"):
            bad.result(timeout=60)
        assert [len(r.token_ids) for r in good.result(timeout=60)] == [10, 10]
        assert engine.cache.n == 0  # the failed job's rows were released
    finally:
        engine.close()


def test_loop_records_the_engine_label_on_every_planner_action() -> None:
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    events: list[R.Event] = []
    reqs = [R.RolloutRequest(
        envelope=R.Envelope.new("test", task_id="t", group_id="g", rollout_id=f"r{i}"), question="What is 2+2?",
        source="test", rollout_index=i, group_size=2, adapter_name="planner", adapter_version=0, max_turns=1,
        sampling=R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=1)) for i in range(2)]
    try:
        run_group(reqs, LoopContext(policy=policy, tools={"calculator": Calculator()}), events.append)
    finally:
        policy.close()
    actions = [e for e in events if isinstance(e, R.PlannerAction)]
    assert len(actions) == 2 and {a.engine for a in actions} == {"local/float32"}


def test_row_cache_compacts_removed_rows_and_keeps_their_content() -> None:
    cache = RowCache(layers=1, kv_heads=1, head_dim=2, dtype=torch.float32, device=torch.device("cpu"), rows=2,
                     length=4)
    first = cache.add_rows(4, 6)  # grows rows and length
    assert first == 0 and cache.rows_cap >= 4 and cache.len_cap >= 6
    for row in range(4):
        cache.k[0][row, :, :3] = float(row)
        cache.lengths[row] = 3
    moves = cache.remove_rows([1, 0])
    assert cache.n == 2 and moves == [(3, 1), (2, 0)]
    assert cache.k[0][0, 0, 0, 0].item() == 2.0 and cache.k[0][1, 0, 0, 0].item() == 3.0


def test_prefix_store_is_per_key_lru_and_bounded_in_tokens() -> None:
    def prefix(tokens: tuple[int, ...]) -> CachedPrefix:
        return CachedPrefix(tokens, [torch.zeros(1, len(tokens), 2)], [torch.zeros(1, len(tokens), 2)])

    store = PrefixStore(max_tokens=10)
    store.add("base", prefix((1, 2, 3, 4)))
    store.add(("planner", 1), prefix((1, 2, 3, 4, 5)))
    assert store.lookup("base", [1, 2, 3, 9])[1] == 3
    assert store.lookup(("planner", 2), [1, 2, 3])[0] is None  # another version never reuses them
    store.add("base", prefix((7, 8, 9)))  # 12 tokens > 10: the least recently used entry goes
    assert store.lookup(("planner", 1), [1, 2, 3])[0] is None
    assert store.lookup("base", [1, 2, 3])[1] == 3
    store.drop("base")
    assert store.lookup("base", [7, 8])[0] is None



@pytest.mark.parametrize("extra", [{"use_dora": True}, {"modules_to_save": ["lm_head"]},
                                   {"target_modules": ["q_proj", "v_proj", "embed_tokens"]}],
                         ids=["dora", "modules_to_save", "lora_on_embeddings"])
def test_an_adapter_the_lean_engine_cannot_run_is_served_by_the_eager_engine(tmp_path: Path, extra: dict) -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    config = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "init_lora_weights": False, **extra}
    dora = get_peft_model(build_tiny_model(), LoraConfig(**config))
    if "modules_to_save" in extra:  # a head copy that differs from the base, so serving without it shows
        with torch.no_grad():
            for name, p in dora.named_parameters():
                if "modules_to_save" in name:
                    p.add_(torch.randn_like(p))
    dora.save_pretrained(str(tmp_path / "dora"))
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    try:
        policy.load_adapter("planner", 1, tmp_path / "dora")
        assert policy._lean_adapters[("planner", 1)] is None  # eager only
        prompt = policy.chat_prompt(MESSAGES[0])
        (gen,) = policy.generate([prompt], R.SamplingParams(temperature=0.8, max_new_tokens=10, seed=1),
                                 adapter_name="planner", adapter_version=1)
    finally:
        policy.close()
    policy._peft.set_adapter("planner@v1")
    assert max_gap(gen, policy._peft, 0.8) < 1e-4


def test_positions_past_max_position_embeddings_are_computed_like_transformers_does() -> None:
    model = build_tiny_model(seed=7)  # 512 positions
    engine = FastEngine(LeanLlama(build_tiny_model(seed=7)))
    prompt = [5 + i % 90 for i in range(505)]
    try:
        (row,) = engine.generate(request([prompt], seed=1, max_new_tokens=20))
    finally:
        engine.close()
    ids = torch.tensor([prompt + row.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    fresh = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(row.token_ids)[:, None])
    assert torch.allclose(fresh.squeeze(-1), torch.tensor(row.logprobs), atol=1e-4)


def test_cascade_attention_reads_shared_prefixes_once_and_changes_nothing_else() -> None:
    model = build_tiny_model(seed=4)
    system = list(range(10, 60))  # a 50-token prompt prefix shared by every row of both calls
    turn1 = [system + [61, 62, 63]] * 5
    turn2 = [system + [70 + i] * (3 + 2 * i) for i in range(4)]  # own suffixes of different lengths
    out = {}
    for cascade in (True, False):
        engine = FastEngine(LeanLlama(build_tiny_model(seed=4)), cascade=cascade, prefix_cache_tokens=0)
        try:
            with engine._state:
                jobs = [engine.submit(request(turn1, seed=1, max_new_tokens=12)),
                        engine.submit(request(turn2, seed=2, max_new_tokens=12))]
            out[cascade] = [r for job in jobs for r in job.result(timeout=60)]
        finally:
            engine.close()
        assert (engine.stats.cascade_steps > 0) == cascade
    for a, b in zip(out[True], out[False], strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    for prompt, row in zip(turn1 + turn2, out[True], strict=True):
        ids = torch.tensor([prompt + row.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        fresh = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).gather(-1, torch.tensor(row.token_ids)[:, None])
        assert torch.allclose(fresh.squeeze(-1), torch.tensor(row.logprobs), atol=1e-4)


def test_both_engines_sample_the_same_tokens_for_the_same_seed() -> None:
    """Per-row generators + the same sampling step: the fast engine is the eager loop, only faster."""
    engines = {e: LocalPolicy.from_model(build_tiny_model(seed=6), build_tiny_tokenizer(), engine=e)
               for e in ("eager", "fast")}
    prompts = [engines["eager"].chat_prompt(m) for m in MESSAGES] * 2
    sampling = R.SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=20, seed=21)
    try:
        out = {e: p.generate(prompts, sampling, adapter_name="p", adapter_version=0) for e, p in engines.items()}
    finally:
        for p in engines.values():
            p.close()
    assert [g.token_ids for g in out["fast"]] == [g.token_ids for g in out["eager"]]
    for a, b in zip(out["fast"], out["eager"], strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4

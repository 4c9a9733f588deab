"""Planner generation tokens/s of the local policy, engine by engine, on real planner calls. Prints JSON.

1. Records a real workload: ``--groups`` groups of the built-in tasks (spread over the four kinds)
   run through the agent loop (model-free roles, the default tools, response prefix ``{"``,
   replies stopped where their JSON object closes), group size 8, ``--max-turns`` turns; every
   ``policy.generate`` call is kept (prompts, sampling, stop rule). Turn-1 calls repeat one prompt
   8 times; later turns have one prompt per trajectory (its own history).
2. Replays the SAME calls against every configuration, interleaved call by call (so load drift on a
   shared machine hits every configuration alike): N=8 (the calls as recorded), N=4 (their first
   four rows), and concurrency 2 (the calls of two groups at the same turn issued at once from two
   threads, as a worker with ``concurrency=2`` does).
3. Measures the behaviour-logprob gap of each configuration to a float32 transformers
   recomputation (prompt + sampled action, fresh forward) on the first rows of the N=8 calls.

Configurations (``CONFIGS``), each one step more than the one before:
- ``eager_fp32``: the transformers-forward loop in float32 -- the baseline (the path before);
- ``eager_bf16``: the same loop in bfloat16 (step 1 alone);
- ``fast_fp32_no_store``: lean forward + static KV cache + one engine for concurrent calls (step 2);
- ``fast_fp32``: + the prefix store across calls (the default where bf16 is not fast);
- ``fast_bf16``: the same in bfloat16 (the default on AMX CPUs and GPUs).

Turn-1 calls (one shared prompt) are mostly decoding; later turns (a prompt per row) are mostly
prefill, so their speed-ups are reported apart as well (``n8_turn1_*``, ``n8_later_*``).

    python bench/bench_generation.py --threads 1 --groups 4 --max-turns 2

``--single CONFIG`` is for whole-process A/B timings (one configuration per process, no recording):
it samples N=8 continuations of the turn-1 planner prompts of ``--groups`` built-in tasks and prints
tokens/s, e.g. ``python bench/bench_generation.py --single fast_fp32 --threads 1 --groups 4``.

What is covered: wall-clock tokens/s of generate() on the CPU, in one process (the model loaded
once per configuration). What is not: vLLM (``bench/bench_rollout.py`` covers whole rollouts).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from streamgrpo.avro import records as R
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.inference.stopping import JsonObjectEnd

#: name -> LocalPolicy settings
CONFIGS: dict[str, dict[str, Any]] = {
    "eager_fp32": {"engine": "eager", "dtype": "float32", "prefix_cache_tokens": 0},
    "eager_bf16": {"engine": "eager", "dtype": "bfloat16", "prefix_cache_tokens": 0},
    "fast_fp32_no_store": {"engine": "fast", "dtype": "float32", "prefix_cache_tokens": 0},
    "fast_fp32": {"engine": "fast", "dtype": "float32", "prefix_cache_tokens": 4096},
    "fast_bf16": {"engine": "fast", "dtype": "bfloat16", "prefix_cache_tokens": 4096},
}
BASELINE = "eager_fp32"


@dataclass(frozen=True)
class Call:
    """One recorded ``generate`` call of the agent loop."""

    group: int
    turn: int
    prompts: list[list[int]]
    sampling: R.SamplingParams
    stop: JsonObjectEnd | None


def record_calls(model: str, groups: int, max_turns: int, max_new_tokens: int, seed: int) -> list[Call]:
    """Run ``groups`` groups of 8 through the agent loop and keep every planner call."""
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import run_group
    from streamgrpo.rollout.runtime import build_context
    from streamgrpo.tasks.builtin import builtin_tasks

    policy = LocalPolicy(model, dtype="float32")
    ctx = build_context(RolloutConfig(model=model, max_turns=max_turns), policy)
    calls: list[Call] = []
    current = {"group": 0, "turn": 0}
    generate = policy.generate

    def recording(prompts: list[list[int]], sampling: R.SamplingParams, **kwargs: Any) -> Any:
        current["turn"] += 1
        calls.append(Call(current["group"], current["turn"], [list(p) for p in prompts], sampling, kwargs.get("stop")))
        return generate(prompts, sampling, **kwargs)

    policy.generate = recording  # type: ignore[method-assign]
    tasks = builtin_tasks()
    for g in range(groups):
        task = tasks[g * len(tasks) // groups]
        current.update(group=g, turn=0)
        sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed + g)
        env = {"task_id": str(uuid.uuid4()), "group_id": str(uuid.uuid4())}
        requests = [R.RolloutRequest(
            envelope=R.Envelope.new("bench", rollout_id=str(uuid.uuid4()), **env), question=task.question,
            source=task.source, rollout_index=i, group_size=8, adapter_name="planner", adapter_version=0,
            max_turns=max_turns, sampling=sampling, metadata=dict(task.metadata)) for i in range(8)]
        run_group(requests, ctx, lambda event: None)
    policy.close()
    return calls


def turn1_calls(policy: LocalPolicy, groups: int, max_new_tokens: int, seed: int) -> list[Call]:
    """The agent loop's first planner call of ``groups`` built-in tasks (8 rows each), without running it."""
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.loop import effective_prefix
    from streamgrpo.rollout.roles import planner
    from streamgrpo.rollout.roles.executor import tool_example
    from streamgrpo.rollout.runtime import build_context
    from streamgrpo.tasks.builtin import builtin_tasks

    ctx = build_context(RolloutConfig(), policy)
    tools = [planner.tool_line(n, t.spec.description, tool_example(t)) for n, t in ctx.tools.items()]
    tasks = builtin_tasks()
    calls = []
    for g in range(groups):
        task = tasks[g * len(tasks) // groups]
        analysis = ctx.analyser.analyse(task.question, list(ctx.tools))
        forced = list(policy.tokenizer.encode(effective_prefix(ctx), add_special_tokens=False))
        prompt = policy.chat_prompt(planner.build_messages(task.question, tools, analysis, [])) + forced
        sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed + g)
        calls.append(Call(g, 1, [prompt] * 8, sampling, JsonObjectEnd(effective_prefix(ctx))))
    return calls


def single(args: argparse.Namespace) -> None:
    """One configuration in this process (see the module docstring)."""
    policy = LocalPolicy(args.model, **CONFIGS[args.single])
    calls = turn1_calls(policy, args.groups, args.max_new_tokens, args.seed)
    secs = toks = 0.0
    for call in calls:
        s, t, _ = timed(policy, call, 8)
        secs, toks = secs + s, toks + t
    policy.close()
    print(json.dumps({"config": args.single, "calls": len(calls), "tokens": toks, "seconds": round(secs, 2),
                      "tokens_per_s": round(toks / secs, 2)}))


def timed(policy: LocalPolicy, call: Call, rows: int) -> tuple[float, int, list[Any]]:
    start = time.perf_counter()
    gens = policy.generate(call.prompts[:rows], call.sampling, adapter_name="planner", adapter_version=0,
                           stop=call.stop)
    return time.perf_counter() - start, sum(len(g.token_ids) for g in gens), gens


def timed_pair(policy: LocalPolicy, pair: Sequence[Call]) -> tuple[float, int]:
    """Both calls at once from two threads (a worker with concurrency 2)."""
    out: list[int] = []
    errors: list[BaseException] = []

    def run(call: Call) -> None:
        try:
            out.append(timed(policy, call, len(call.prompts))[1])
        except BaseException as exc:  # noqa: BLE001 - re-raised below in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in pair]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start, sum(out)


def logprob_gap(reference: Any, gens: Sequence[Any], temperature: float) -> list[float]:
    """|recorded - fp32 recomputation| of every sampled token of ``gens`` (fresh, unpadded forward)."""
    gaps: list[float] = []
    for gen in gens:
        ids = torch.tensor([gen.prompt_token_ids + gen.token_ids])
        with torch.no_grad():
            logits = reference(input_ids=ids).logits[0].float()
        start = len(gen.prompt_token_ids) - 1
        lp = torch.log_softmax(logits[start:start + len(gen.token_ids)] / temperature, dim=-1)
        fresh = lp.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1)
        gaps += (fresh - torch.tensor(gen.logprobs)).abs().tolist()
    return gaps


def replay(policies: dict[str, LocalPolicy], calls: list[Call], args: argparse.Namespace) -> dict[str, Any]:
    names = list(policies)
    acc = {name: {w: [0.0, 0] for w in ("n8", "n4", "c2", "n8_turn1", "n8_later")} for name in names}
    per_call: dict[str, list[float]] = {name: [] for name in names}  # paired tokens/s at N=8
    gap_rows: dict[str, list[Any]] = {name: [] for name in names}
    for i, call in enumerate(calls):
        order = names[i % len(names):] + names[:i % len(names)]  # rotate who goes first
        for name in order:
            for workload, rows in (("n8", 8), ("n4", 4)):
                if workload == "n4" and name in args.n8_only:
                    continue
                secs, toks, gens = timed(policies[name], call, rows)
                acc[name][workload][0] += secs
                acc[name][workload][1] += toks
                if workload == "n8":
                    per_call[name].append(toks / secs)
                    by_turn = acc[name]["n8_turn1" if call.turn == 1 else "n8_later"]
                    by_turn[0] += secs
                    by_turn[1] += toks
                    if len(gap_rows[name]) < args.gap_rows:
                        gap_rows[name] += gens[: args.gap_rows - len(gap_rows[name])]
        print(f"[bench_generation] call {i + 1}/{len(calls)} (group {call.group} turn {call.turn}, "
              f"{len(call.prompts)} rows)", file=sys.stderr, flush=True)
    pairs = [(a, b) for a in calls for b in calls if b.group == a.group + 1 and a.group % 2 == 0 and b.turn == a.turn]
    for j, pair in enumerate(pairs):
        for name in names[j % len(names):] + names[:j % len(names)]:
            if name in args.n8_only:
                continue
            secs, toks = timed_pair(policies[name], pair)
            acc[name]["c2"][0] += secs
            acc[name]["c2"][1] += toks
    return {"acc": acc, "per_call": per_call, "gap_rows": gap_rows, "pairs": len(pairs)}


def summarise(result: dict[str, Any], reference: Any, temperature: float, policies: dict[str, LocalPolicy],
              load_s: dict[str, float]) -> dict[str, Any]:
    acc, per_call = result["acc"], result["per_call"]
    base = acc[BASELINE]
    rows: dict[str, Any] = {}
    for name, workloads in acc.items():
        row: dict[str, Any] = {"engine": policies[name].engine, "dtype": str(policies[name].dtype).split(".")[-1],
                               "load_s": round(load_s[name], 2)}
        for w, (secs, toks) in workloads.items():
            if secs == 0:
                continue
            row[f"{w}_tokens_per_s"] = round(toks / secs, 2)
            row[f"{w}_tokens"] = toks
            if base[w][0]:
                row[f"{w}_speedup"] = round((toks / secs) / (base[w][1] / base[w][0]), 2)
        row["n8_paired_speedup_median"] = round(statistics.median(
            a / b for a, b in zip(per_call[name], per_call[BASELINE], strict=True)), 2)
        gaps = logprob_gap(reference, result["gap_rows"][name], temperature)
        row["logprob_gap_vs_fp32_mean"] = float(f"{statistics.fmean(gaps):.3g}")
        row["logprob_gap_vs_fp32_max"] = float(f"{max(gaps):.3g}")
        row["logprob_gap_tokens"] = len(gaps)
        fast = policies[name]._fast
        if fast is not None:
            s = fast.stats
            row["prefill_tokens"], row["prefix_reused_tokens"] = s.prefill_tokens, s.reused_prefix_tokens
            row["mean_rows_per_step"] = round(s.decoded_rows / max(1, s.decode_steps), 2)
        rows[name] = row
    return rows


def table(rows: dict[str, Any]) -> str:
    cols = [("n8_tokens_per_s", "N=8 tok/s"), ("n8_speedup", "N=8 x"), ("n8_paired_speedup_median", "N=8 x (paired median)"),
            ("n8_turn1_speedup", "N=8 turn 1 x"), ("n8_later_speedup", "N=8 turn 2 x"),
            ("n4_tokens_per_s", "N=4 tok/s"), ("n4_speedup", "N=4 x"), ("c2_tokens_per_s", "conc. 2 tok/s"),
            ("c2_speedup", "conc. 2 x"), ("logprob_gap_vs_fp32_mean", "abs dlogp mean"),
            ("logprob_gap_vs_fp32_max", "abs dlogp max"), ("load_s", "load s")]
    lines = ["| configuration | " + " | ".join(c[1] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(str(row.get(k, "-")) for k, _ in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--groups", type=int, default=4, help="task groups recorded (even: paired for concurrency 2)")
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--n8-only", nargs="*", default=["eager_bf16"],
                        help="configurations run at N=8 only (not at N=4 nor concurrency 2)")
    parser.add_argument("--gap-rows", type=int, default=16, help="generations per configuration checked for the gap")
    parser.add_argument("--single", choices=list(CONFIGS), default=None,
                        help="run only this configuration on turn-1 prompts (whole-process timings)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.single:
        single(args)
        return
    configs = [BASELINE] + [c for c in args.configs if c != BASELINE]
    t0 = time.perf_counter()
    calls = record_calls(args.model, args.groups, args.max_turns, args.max_new_tokens, args.seed)
    record_s = time.perf_counter() - t0
    policies: dict[str, LocalPolicy] = {}
    load_s: dict[str, float] = {}
    for name in configs:
        t = time.perf_counter()
        policies[name] = LocalPolicy(args.model, **CONFIGS[name])
        load_s[name] = time.perf_counter() - t
    warm = replace(calls[0], prompts=calls[0].prompts[:2], sampling=replace(calls[0].sampling, max_new_tokens=4))
    for policy in policies.values():
        timed(policy, warm, 2)
    result = replay(policies, calls, args)
    reference = LocalPolicy(args.model, engine="eager", dtype="float32")._base
    rows = summarise(result, reference, calls[0].sampling.temperature, policies, load_s)
    for policy in policies.values():
        policy.close()
    prompt_lens = [len(p) for c in calls for p in c.prompts]
    out = {
        "model": args.model, "device": "cpu", "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "machine": platform.machine(), "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "calls": len(calls), "concurrent_pairs": result["pairs"], "groups": args.groups,
        "max_turns": args.max_turns, "max_new_tokens": args.max_new_tokens,
        "prompt_tokens_mean": round(statistics.fmean(prompt_lens), 1), "prompt_tokens_max": max(prompt_lens),
        "record_s": round(record_s, 1), "results": rows, "table": table(rows),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

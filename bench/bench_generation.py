"""Group-batched vs one-by-one generation with the local policy (same model, same run). Prints JSON.

For each group size N: ``rounds`` times, (a) ONE ``generate([prompt] * N)`` call (how a group's N
rollouts share their turn-1 state; the repeated prompt is prefilled once), (b) the same call with the
prompt prefilled for every row, and (c) N separate ``generate([prompt])`` calls.
Reports completions/s and generated tokens/s of each and the speed-up. Sampling is seeded, so the
two modes see the same settings; EOS may stop rows early, so token counts are measured, not assumed.

    python bench/bench_generation.py --model smollm2-135m-instruct --groups 4 8 --max-new-tokens 24 --threads 1

What is covered: wall-clock throughput of the in-process sampler (CPU or GPU). What is not: vLLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

import torch

from streamgrpo.avro import records as R
from streamgrpo.rollout.policy.local import LocalPolicy

QUESTION = [{"role": "system", "content": "You are a planner. Reply with one short plan step."},
            {"role": "user", "content": "What is the population of the capital of France, divided by 1000?"}]


#: mode -> (one batched call, share the prefill of the repeated prompt)
MODES = {"batched": (True, True), "batched_no_shared_prefill": (True, False), "one_by_one": (False, True)}

#: A planner-sized system prompt (tool list and instructions) for --long-prompt.
TOOLS = ("calculator: evaluates an arithmetic expression such as 12*(3+4) and returns the number. "
         "knowledge_search: BM25 search over the fact archive; returns the best passages with their titles. "
         "python: runs a short Python program in a sandbox and returns its standard output. ")


def run_mode(policy: LocalPolicy, prompt: list[int], n: int, mode: str, sampling: R.SamplingParams) -> tuple[
    float, int
]:
    """Generate N completions; returns (seconds, generated tokens)."""
    batched, policy.share_prefill = MODES[mode]
    start = time.perf_counter()
    if batched:
        gens = policy.generate([prompt] * n, sampling, adapter_name="bench", adapter_version=0)
    else:
        seed = sampling.seed or 0  # a distinct seed per call, else N identical samples
        gens = [policy.generate([prompt], dataclasses.replace(sampling, seed=seed + i), adapter_name="bench",
                                adapter_version=0)[0] for i in range(n)]
    return time.perf_counter() - start, sum(len(g.token_ids) for g in gens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--long-prompt", action="store_true",
                        help="a planner-sized prompt (~500 tokens of tool descriptions) instead of a 45-token one")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = LocalPolicy(args.model, device=args.device)
    messages = QUESTION
    if args.long_prompt:
        messages = [{"role": "system", "content": QUESTION[0]["content"] + " Tools:\n" + TOOLS * 6}, QUESTION[1]]
    prompt = policy.chat_prompt(messages)
    warm = R.SamplingParams(temperature=args.temperature, max_new_tokens=4, seed=0)
    policy.generate([prompt, prompt], warm, adapter_name="bench", adapter_version=0)  # warm-up
    results = []
    for n in args.groups:
        row: dict[str, object] = {"group_size": n}
        for mode in MODES:
            secs, toks = 0.0, 0
            for r in range(args.rounds):
                sampling = R.SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                                            seed=1000 * n + r)
                s, t = run_mode(policy, prompt, n, mode, sampling)
                secs, toks = secs + s, toks + t
            print(f"N={n} {mode}: {toks} tokens in {secs:.1f}s", file=sys.stderr, flush=True)
            row[mode] = {"seconds": round(secs, 3), "completions": n * args.rounds, "generated_tokens": toks,
                         "completions_per_s": round(n * args.rounds / secs, 3),
                         "tokens_per_s": round(toks / secs, 2)}
        row["speedup_completions_per_s"] = round(
            row["batched"]["completions_per_s"] / row["one_by_one"]["completions_per_s"], 2)  # type: ignore[index]
        row["shared_prefill_speedup"] = round(
            row["batched"]["completions_per_s"]  # type: ignore[index]
            / row["batched_no_shared_prefill"]["completions_per_s"], 2)  # type: ignore[index]
        results.append(row)
    print(json.dumps({"model": args.model, "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "device": args.device, "torch_threads": torch.get_num_threads(),
                      "cpu_count": os.cpu_count(), "machine": platform.machine(), "prompt_tokens": len(prompt),
                      "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                      "rounds": args.rounds, "results": results}, indent=2))


if __name__ == "__main__":
    main()

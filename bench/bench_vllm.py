"""Planner generation on a local vLLM server vs the in-process local policy, paired in one run. Prints JSON.

One group's turn: ``generate([prompt] * N)`` with a planner-sized prompt (the tool-list system prompt of
bench_generation.py --long-prompt plus a question that changes every round, so vLLM's prefix cache can
keep the shared system prompt but not the question). Four modes, alternated within every round in a
rotating order (A/B pairing on a shared machine; the server is SIGSTOPped while the local policy runs, since
an idle vLLM CPU engine keeps its cores busy -- its idle CPU use is reported): the local policy on the base model and on a rank-16
q/k/v/o LoRA adapter (what the trainer publishes), and the same two on vLLM. The vLLM server is started
as ``streamgrpo run --policy vllm`` starts it (LoRA on, ``--logprobs-mode processed_logprobs``; one
server per ``--dtypes`` entry, one after the other) and stopped by pid at the end.

    python bench/bench_vllm.py --group-size 8 --max-new-tokens 64 --rounds 3

Reports generated tokens/s per mode (median over rounds), the per-round ratios vLLM / local (median),
server start-up time and resident memory, and the load average. Sampling: temperature 1, top_p 1,
seeded, no stop rule (replies run to EOS or max_new_tokens; tokens are counted, not assumed).
What is not covered: GPUs, concurrency across groups (one request at a time, as one worker thread).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_generation import QUESTION, TOOLS

from streamgrpo.avro import records as R
from streamgrpo.inference.base import PlannerPolicy
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.inference.vllm import VLLMPolicy
from streamgrpo.inference.vllm_server import free_port, served_model_name, serving
from streamgrpo.rollout.config import RolloutConfig

QUESTIONS = ["What is the population of the capital of France, divided by 1000?",
             "How many days are there in 17 weeks, minus the number of planets?",
             "Which year did the Eiffel Tower open, plus 12 squared?",
             "What is the square root of 1764, times the number of continents?",
             "Who wrote Hamlet, and how many letters are in the surname?",
             "What is 23 times 19, minus the boiling point of water in Celsius?"]


def make_adapter(root: Path) -> Path:
    """A rank-16 q/k/v/o LoRA adapter with non-zero weights, saved as the trainer saves it."""
    import torch

    from streamgrpo.trainer.model import ModelSpec, load_policy

    model = load_policy(ModelSpec(device="cpu"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    model.save_pretrained(str(root / "v1"))
    return root / "v1"


def messages(round_index: int) -> list[dict[str, str]]:
    system = QUESTION[0]["content"] + " Tools:\n" + TOOLS * 6
    return [{"role": "system", "content": system},
            {"role": "user", "content": QUESTIONS[round_index % len(QUESTIONS)]}]


def timed(policy: PlannerPolicy, prompt: list[int], n: int, version: int, sampling: R.SamplingParams) -> tuple[
    float, int
]:
    start = time.perf_counter()
    gens = policy.generate([prompt] * n, sampling, adapter_name="bench", adapter_version=version)
    return time.perf_counter() - start, sum(len(g.token_ids) for g in gens)


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def paused(pgid: int | None) -> Any:
    """SIGSTOP the server's process group for the block (the local policy then has the cores, as it would
    without a server: an idle vLLM CPU engine keeps spinning), SIGCONT after."""
    if pgid is None:
        yield
        return
    os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pgid, signal.SIGCONT)


def group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in a process group (the API server + its engine core)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int((stat.parent / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return round(total / 2**20, 1)


def run_dtype(dtype: str, local: LocalPolicy, adapter: Path, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    cfg = RolloutConfig(vllm_url=f"http://127.0.0.1:{free_port()}/v1", vllm_dtype=dtype)  # type: ignore[arg-type]
    started = time.perf_counter()
    with serving(cfg, log) as server:
        startup = time.perf_counter() - started
        remote = VLLMPolicy(cfg.vllm_url, served_model_name(cfg), timeout=1800, tokenizer=local.tokenizer,
                            dtype=dtype)
        remote.load_adapter("bench", 1, adapter)
        policies: dict[str, tuple[PlannerPolicy, int]] = {"local_base": (local, 0), "local_adapter": (local, 1),
                                                         "vllm_base": (remote, 0), "vllm_adapter": (remote, 1)}
        warm = R.SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
        pgid = server.pid
        for name, (policy, version) in policies.items():  # first LoRA prefill on vLLM is slow: not timed
            with paused(pgid if name.startswith("local") else None):
                t, _ = timed(policy, local.chat_prompt(messages(99)), 2, version, warm)
            print(f"[{dtype}] warm-up {name}: {t:.1f}s", file=sys.stderr, flush=True)
        cpu0 = group_cpu_s(pgid or 0)
        time.sleep(10)
        idle_cores = (group_cpu_s(pgid or 0) - cpu0) / 10
        rates: dict[str, list[float]] = {name: [] for name in policies}
        order = list(policies)
        for r in range(args.rounds):
            prompt = local.chat_prompt(messages(r))
            sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=100 + r)
            for name in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
                policy, version = policies[name]
                with paused(pgid if name.startswith("local") else None):
                    secs, toks = timed(policy, prompt, args.group_size, version, sampling)
                rates[name].append(toks / secs)
                print(f"[{dtype}] round {r} {name}: {toks} tokens in {secs:.1f}s ({toks / secs:.1f}/s)",
                      file=sys.stderr, flush=True)
        rss = group_rss_mb(server.pid or 0)
        remote.close()
    ratio = {f"{m}_vs_local_{m}": round(statistics.median(
        v / lo for v, lo in zip(rates[f"vllm_{m}"], rates[f"local_{m}"], strict=True)), 2) for m in ("base", "adapter")}
    return {"startup_s": round(startup, 1), "server_rss_mb": rss, "server_idle_cpu_cores": round(idle_cores, 2),
            "ratio_median_of_rounds": ratio,
            "tokens_per_s_median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
            "tokens_per_s_rounds": {k: [round(x, 1) for x in v] for k, v in rates.items()}}


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| server dtype | local base | local + adapter | vLLM base | vLLM + adapter | vLLM/local base | "
             "vLLM/local adapter | start-up | server RSS |", "|---|---|---|---|---|---|---|---|---|"]
    for dtype, r in results.items():
        t, q = r["tokens_per_s_median"], r["ratio_median_of_rounds"]
        lines.append(f"| {dtype} | {t['local_base']} | {t['local_adapter']} | {t['vllm_base']} | {t['vllm_adapter']} | "
                     f"{q['base_vs_local_base']}x | {q['adapter_vs_local_adapter']}x | {r['startup_s']} s | "
                     f"{r['server_rss_mb'] / 1024:.1f} GiB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    local = LocalPolicy("smollm2-135m-instruct")  # the local policy of today: fp32 weights, torch's threads
    with tempfile.TemporaryDirectory() as tmp:
        adapter = make_adapter(Path(tmp))
        local.load_adapter("bench", 1, adapter)
        results = {d: run_dtype(d, local, adapter, args, Path(tmp) / f"vllm-{d}.log") for d in args.dtypes}
    prompt_tokens = len(local.chat_prompt(messages(0)))
    print(json.dumps({"group_size": args.group_size, "prompt_tokens": prompt_tokens,
                      "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "cpu_count": os.cpu_count(),
                      "load_avg_1m_start": round(load_start, 2), "load_avg_1m_end": round(os.getloadavg()[0], 2),
                      "results": results, "table": table(results)}, indent=2))


if __name__ == "__main__":
    main()

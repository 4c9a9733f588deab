"""Side by side with TRL on the same wall-clock budget: held-out accuracy before and after training.

    python bench/bench_trl_learning.py --budget-s 1800      # the comparison (see "Run time" below)
    python bench/bench_trl_learning.py --budget-s 180       # a smoke run

One command, four phases, each in its own process (one heavy thing at a time):

1. TRL: ``GRPOTrainer`` with LoRA on the same base model (SmolLM2-135M-Instruct, the bundled
   copy), on the built-in TRAIN split in the order ``streamgrpo run`` submits it, with
   streamgrpo's default settings (read from its config classes: group size, rollouts per
   optimizer step, learning rate, clip range, KL weight, grad-norm clip, LoRA rank/alpha/targets,
   temperature, per-action token budget and turn budget), rewarded by streamgrpo's judge for
   source ``builtin`` (``correct`` by default: correctness only), until the budget is spent; the budget clock starts
   before the model loads. ``--mode tools`` (default) uses TRL's tool calling (multi-turn, the
   real tools: see ``trl_agent.py`` for what TRL can and cannot express); ``--mode single`` is
   one planner turn, no tools. Its adapter is saved.
2. streamgrpo: ``streamgrpo run --duration BUDGET`` with its default settings and a fresh
   ``--home`` (its model cache points at the shared converted model). Its report carries the
   final held-out evaluation of the base model and its last adapter (trigger ``run-final``).
3. ``streamgrpo eval --base --adapter-dir TRL --adapter-dir LAST --tasks builtin:heldout``:
   both adapters and the base model, greedy, correctness only, in ONE evaluation, so both paired
   differences are against the same base outcomes (a second command only when streamgrpo's last
   adapter is v1, which collides with the TRL directory's version).
4. One JSON line (read by ``bench/run_all.py``, section ``trl_learning``).

Run time: about 2 x budget + setup (~2 min) + the run's final evaluation (2 versions) + the
evaluation of phase 3 (3 versions); one version of the 94-task held-out split takes a few
minutes on 2 cores (measured figures in BENCHMARKS.md).

Not covered: several seeds (one run per side), GPUs, Kafka costs in isolation.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "streamgrpo.cli", *args], text=True, cwd=ROOT, env=env, **kw)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# -- phase 1: TRL ---------------------------------------------------------------------------------

def train_trl(budget_s: float, mode: str, out_dir: Path) -> dict[str, Any]:
    """TRL GRPOTrainer for ``budget_s`` seconds (wall clock, model load included); saves the adapter."""
    t0 = time.monotonic()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl_agent import (
        JudgeReward,
        agent_context,
        planner_messages,
        prepare_tokenizer,
        streamgrpo_defaults,
        tool_functions,
    )

    from streamgrpo.models.base import resolve_base_model
    from streamgrpo.tasks.datasets import TaskRow
    from streamgrpo.tasks.reader import read_rows

    torch.manual_seed(0)
    d = streamgrpo_defaults()
    ctx = agent_context()
    model_path = str(resolve_base_model("smollm2-135m-instruct"))
    tok = prepare_tokenizer(model_path, d.response_prefix)
    rows = [r for _, r in read_rows("builtin:train") if isinstance(r, TaskRow)]
    ds = Dataset.from_list([{"prompt": planner_messages(r.question, ctx), "question": r.question,
                             "truths": list(r.ground_truths), "source": r.source} for r in rows])
    reward = JudgeReward(d.response_prefix)
    tools = tool_functions(ctx) if mode == "tools" else None
    steps: list[dict[str, float]] = []

    class Budget(TrainerCallback):  # type: ignore[misc]
        started = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.started = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **k: Any) -> None:
            took = time.monotonic() - self.started
            steps.append({"s": round(took, 2), "t": round(time.monotonic() - t0, 1), "load": _load()})
            if time.monotonic() - t0 + took > budget_s:  # the next step would end past the budget
                control.should_training_stop = True

    work = Path(tempfile.mkdtemp(prefix="trl-grpo-"))
    turns = d.max_turns if tools else 1
    args = GRPOConfig(
        output_dir=str(work), per_device_train_batch_size=d.samples_per_step, num_generations=d.group_size,
        max_completion_length=d.max_new_tokens * turns, generation_kwargs={"max_new_tokens": d.max_new_tokens},
        max_tool_calling_iterations=max(1, turns - 1) if tools else None,
        learning_rate=d.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=d.weight_decay,
        max_steps=1_000_000, logging_steps=1, use_cpu=True, report_to="none", save_strategy="no",
        bf16=False, gradient_checkpointing=False, temperature=d.temperature, top_p=d.top_p, beta=d.kl_coef,
        loss_type="grpo", epsilon=d.eps_low, epsilon_high=d.eps_high, max_grad_norm=d.max_grad_norm,
        num_iterations=1, shuffle_dataset=False, seed=0, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model_path, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          peft_config=LoraConfig(task_type="CAUSAL_LM", **d.lora), callbacks=[Budget()], tools=tools)
    setup_s = time.monotonic() - t0
    trainer.train()
    trainer.save_model(str(out_dir))
    wall = time.monotonic() - t0
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "mode": mode, "steps": len(steps), "samples": len(steps) * d.samples_per_step, "wall_s": round(wall, 1),
        "setup_s": round(setup_s, 1), "s_per_step": round(sum(s["s"] for s in steps) / max(1, len(steps)), 2),
        "reward_per_step": [round(h["reward"], 4) for h in reward.history],
        "answered_per_step": [round(h["answered"], 3) for h in reward.history],
        "tool_calls_per_rollout": [round(h["tool_calls"], 2) for h in reward.history],
        "completion_tokens_mean": [round(h.get("completions/mean_length", 0.0), 1) for h in logs],
        "load_mean": round(sum(s["load"] for s in steps) / max(1, len(steps)), 2),
        "settings": {"group_size": d.group_size, "samples_per_step": d.samples_per_step, "lr": d.lr,
                     "max_turns": turns, "max_new_tokens_per_call": d.max_new_tokens,
                     "max_completion_length": d.max_new_tokens * turns, "eps": [d.eps_low, d.eps_high],
                     "kl": d.kl_coef, "lora": d.lora, "temperature": d.temperature},
        "adapter": str(out_dir),
    }


# -- phase 2: streamgrpo --------------------------------------------------------------------------

def run_streamgrpo(budget_s: float, work: Path) -> dict[str, Any]:
    """``streamgrpo run --duration budget_s`` with default settings in a fresh home; its summary."""
    from streamgrpo.models.base import default_cache_dir, resolve_base_model

    resolve_base_model("smollm2-135m-instruct")  # converted once, in the shared cache
    home = work / "sg-home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(default_cache_dir())  # read only: the conversion is already there
    t0 = time.monotonic()
    log = work / "streamgrpo-run.log"
    with open(log, "w") as fh:
        proc = _cli("run", "--duration", str(budget_s), "--home", str(home), stdout=fh, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    reports = sorted(home.glob("runs/*/report/summary.json"))
    if proc.returncode != 0 or not reports:
        raise RuntimeError(f"streamgrpo run failed (exit {proc.returncode}); see {log}: {log.read_text()[-1500:]}")
    summary = json.loads(reports[-1].read_text())
    run_dir = reports[-1].parent.parent
    latest = int(summary.get("latest_adapter") or 0)
    final = {str(e["version"]): e for e in summary.get("evaluations", []) if e["trigger"] == "run-final"}
    return {
        "wall_s": round(wall, 1), "trainer_steps": summary["adapters"][-1]["step"] if summary["adapters"] else 0,
        "samples": summary["training_samples"], "rollouts": summary["rollouts"], "groups": summary["groups"],
        "adapters_published": summary["adapters_published"], "latest_adapter": latest,
        "serving_version": summary["serving_version"],
        "stale_share": summary.get("loop", {}).get("stale_share"),
        "run_final": {v: {k: e[k] for k in ("accuracy", "ci_low", "ci_high", "tasks")} for v, e in final.items()},
        "adapter": str(run_dir / "adapters" / "planner" / f"v{latest}") if latest else None,
        "report": str(run_dir / "report"), "log": str(log),
    }


# -- phase 3: one evaluation ----------------------------------------------------------------------

def evaluate(dirs: list[str], work: Path, tasks: str) -> list[dict[str, Any]]:
    """``streamgrpo eval --base --adapter-dir ...`` (greedy, correctness only) -> its JSON rows."""
    out = work / f"eval-{len(list(work.glob('eval-*.json')))}.json"
    args = ["eval", "--tasks", tasks, "--base", "--format", "json", "--no-publish", "--output", str(out)]
    for d in dirs:
        args += ["--adapter-dir", d]
    proc = _cli(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"streamgrpo eval failed: {proc.stderr[-1500:]}")
    return list(json.loads(out.read_text()))


def evaluations(trl_dir: str, sg_dir: str | None, sg_version: int, work: Path, tasks: str) -> dict[str, Any]:
    """Base, TRL and streamgrpo rows of the held-out evaluation, keyed by side."""
    if sg_dir is None:
        rows = evaluate([trl_dir], work, tasks)
        return {"base": rows[0], "trl": rows[1], "streamgrpo": None, "commands": 1}
    if sg_version != 1:
        rows = evaluate([trl_dir, sg_dir], work, tasks)
        return {"base": rows[0], "trl": rows[1], "streamgrpo": rows[2], "commands": 1}
    first, second = evaluate([trl_dir], work, tasks), evaluate([sg_dir], work, tasks)
    return {"base": first[0], "trl": first[1], "streamgrpo": second[1], "commands": 2}


def _judge() -> str:
    """The judge streamgrpo routes built-in tasks to (what both sides are rewarded by)."""
    from streamgrpo.judge.config import JudgeSettings
    from streamgrpo.judge.service import Router

    return Router(JudgeSettings()).judge_name("builtin")


# -- phase 4: the result --------------------------------------------------------------------------

def _acc(row: dict[str, Any] | None) -> str:
    if row is None:
        return "n/a"
    return f"{row['accuracy']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _diff(row: dict[str, Any] | None) -> str:
    if row is None or "diff" not in row:
        return "n/a"
    return f"{row['diff']:+.3f} [{row['diff_ci_low']:+.3f}, {row['diff_ci_high']:+.3f}]"


def table(budget_s: float, trl: dict[str, Any], sg: dict[str, Any], ev: dict[str, Any]) -> str:
    base, t, s = ev["base"], ev["trl"], ev["streamgrpo"]
    lines = [
        f"| held-out ({base['tasks']} tasks, greedy) | TRL GRPOTrainer ({trl['mode']}) | streamgrpo run |",
        "|---|---|---|",
        f"| budget (s) | {budget_s:.0f} | {budget_s:.0f} |",
        f"| wall time of the training phase (s) | {trl['wall_s']:.0f} | {sg['wall_s']:.0f} |",
        f"| optimizer steps | {trl['steps']} | {sg['trainer_steps']} |",
        f"| rollouts trained on | {trl['samples']} | {sg['samples']} |",
        f"| base accuracy [95% CI] | {_acc(base)} | {_acc(base)} |",
        f"| after accuracy [95% CI] | {_acc(t)} | {_acc(s)} |",
        f"| paired difference vs base [95% CI] | {_diff(t)} | {_diff(s)} |",
        f"| answered / parse failures (after) | {t['answered']:.2f} / {t['parse_fail']:.2f} | "
        + (f"{s['answered']:.2f} / {s['parse_fail']:.2f} |" if s else "n/a |"),
        f"| tool calls per task (after) | {t['tools_per_task']:.2f} | " + (f"{s['tools_per_task']:.2f} |" if s else "n/a |"),
    ]
    return "\n".join(lines)


EXPRESSED = {
    "tools": "TRL side: GRPOTrainer(tools=...) multi-turn tool calling with streamgrpo's real tools (calculator, "
             "python, knowledge_search, run through its executor), streamgrpo's first-turn planner prompt and planner "
             "JSON (own chat template + response template: SmolLM2's template has no tool support and TRL has no "
             "parser for it), tool results appended as 'Result: ...' turns and masked from the loss, one advantage per "
             "trajectory, reward = streamgrpo's {judge} judge on the final answer. Not expressible in TRL: the "
             "re-rendered state prompt (streamgrpo shows the last 3 steps in one user message), continuing after an "
             "unparseable reply (TRL ends the trajectory), a tool call in the last turn (not run), a per-turn token "
             "budget separate from tool-result tokens (one max_completion_length for all turns and results), "
             "stopping at the end of the JSON object, and grammar-constrained replies (streamgrpo's default "
             "`[rollout] constrain = auto`; TRL samples freely, so its replies can fail to parse).",
    "single": "TRL side: single turn (mode single): streamgrpo's first-turn planner prompt, one reply, no tool is "
              "run; reward = streamgrpo's {judge} judge on that reply's answer.",
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=float, required=True, help="Wall-clock training budget of EACH side.")
    p.add_argument("--mode", choices=("tools", "single"), default="tools", help="TRL side: tool calling or one turn.")
    p.add_argument("--tasks", default="builtin:heldout", help="Held-out task set of the evaluation.")
    p.add_argument("--workdir", type=Path, default=None, help="Keep adapters, run and evaluations here.")
    a = p.parse_args(argv)
    missing = [m for m in ("trl", "datasets") if importlib.util.find_spec(m) is None]
    if missing:
        p.error(f"{' and '.join(missing)} not installed: run `pip install -e '.[bench]'` (the bench extra) first")
    t0 = time.monotonic()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="bench-trl-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    trl_dir = work / "trl-grpo-adapter"
    proc = subprocess.run([sys.executable, __file__, "--trl-child", str(a.budget_s), a.mode, str(trl_dir)],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(HERE)))
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"TRL phase failed: {proc.stderr[-2000:]}")
    trl = json.loads(lines[-1])
    sg = run_streamgrpo(a.budget_s, work)
    ev = evaluations(str(trl_dir), sg["adapter"], sg["latest_adapter"], work, a.tasks)
    for side, row in (("trl", ev["trl"]), ("streamgrpo", ev["streamgrpo"])):
        target = trl if side == "trl" else sg
        target["heldout"] = row
    return {
        "bench": "trl_learning", "budget_s": a.budget_s, "trl_mode": a.mode, "seconds": round(time.monotonic() - t0),
        "heldout_base": ev["base"], "trl": trl, "streamgrpo": sg, "eval_commands": ev["commands"],
        "workdir": str(work), "table": table(a.budget_s, trl, sg, ev), "notes": EXPRESSED[a.mode].format(judge=_judge()),
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trl-child":
        print(json.dumps(train_trl(float(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))))
    else:
        print(json.dumps(main()))

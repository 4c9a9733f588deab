"""`streamgrpo run --policy vllm`: the whole loop with the planner served by a real vLLM server on this CPU.

The run starts and supervises the server, the trainer publishes adapter v1, the rollout worker loads it
into vLLM through the runtime API and a rollout is served by it (`--until-version 1` stops there); the
run then stops the server. The judge is the default (``correct``); no warm-start demonstrations (``--demos
none``: they would train v1 on their own). Checked from the events: every
PlannerAction says ``engine="vllm/float32"`` and records the planner grammar it was sampled under
(``next-step/v2``), some were served by v1, every rollout answered, every reward came from the ``correct``
judge, and v1 was trained from groups with reward variance (a zero-variance group trains nothing).
Skipped loudly without ``make setup-vllm`` (failed in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fixtures.vllm.support import require_vllm

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.broker, pytest.mark.model, pytest.mark.timeout(1800)]


def vllm_processes() -> set[int]:
    """Processes that are a vLLM server or its engine core (by command line / process title)."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"vllm.entrypoints" in text or text.startswith(b"VLLM::"):
            found.add(int(cmdline.parent.name))
    return found


def test_run_with_the_vllm_policy_serves_published_adapters(kafka_ns: KafkaSettings, tmp_path: Path,
                                                            model_cache: Path) -> None:
    require_vllm()
    before = vllm_processes()
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(
        f'[kafka]\ntopic_prefix = "{kafka_ns.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f'[loop]\nmax_turns = 2\nsamples_per_step = 4\nmodel_cache = "{model_cache}"\n\n'
        "[streams]\nmax_new_tokens = 40\ngroup_timeout_s = 300.0\n\n"
        "[trainer]\npublish_every = 1\n\n"
        "[rollout]\nconcurrency = 1\nvllm_kv_cache_gib = 1\n"
        # the judge is the default ('correct'): groups train only where the vLLM planner's answers differ in
        # correctness, which needs its replies under the planner grammar (the last turn answers)
    )
    home = tmp_path / "home"
    env = dict(os.environ, STREAMGRPO_CONFIG=str(cfg))
    env.pop("STREAMGRPO_BOOTSTRAP", None)
    proc = subprocess.run(
        [sys.executable, "-m", "streamgrpo.cli", "run", "--policy", "vllm", "--bootstrap", kafka_ns.bootstrap or "",
         "--home", str(home), "--duration", "1200", "--until-version", "1", "--limit", "40", "--group-size", "4",
         # no warm-start demonstrations: they train v1 by themselves within minutes (given tokens, groups of one),
         # and this test is about v1 coming from GRPO groups of vLLM samples
         "--demos", "none"],
        env=env, capture_output=True, text=True, timeout=1700,
    )
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(home.glob("runs/*/logs/*.log")))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs
    assert "vLLM server ready after" in proc.stdout and "stopping (--until-version)" in proc.stdout, \
        proc.stdout[-3000:] + logs
    assert vllm_processes() - before == set(), "the run left vLLM processes behind"

    actions = [r.event for r in read_topic(kafka_ns, "planner-actions")]
    assert actions and all(isinstance(a, R.PlannerAction) and a.engine == "vllm/float32" for a in actions)
    assert any(a.adapter_version >= 1 for a in actions), "vLLM never served the published adapter"
    assert all(len(a.action_token_ids) == len(a.behaviour_logprobs) > 0 for a in actions)
    # every reply was sampled under the planner grammar, recorded as for the local policy
    assert all((a.sampling.constraint or "").startswith("next-step/v2?") for a in actions), \
        {a.sampling.constraint for a in actions}
    assert all(a.parse_status != R.ParseStatus.FAILED for a in actions)

    rollouts = [r.event for r in read_topic(kafka_ns, "rollouts")]
    statuses = Counter(r.status for r in rollouts)
    assert rollouts and statuses == {R.RolloutStatus.ANSWERED: len(rollouts)}, statuses  # answered rate 1.0
    judges = {r.event.judge.name for r in read_topic(kafka_ns, "rewards")}
    assert judges == {"correct"}, judges
    groups = [r.event for r in read_topic(kafka_ns, "groups")]
    trained = [g for g in groups if g.trains]
    assert trained and all(g.reward_std > 0 and g.received > 1 for g in trained), \
        [(g.reason, g.received, g.reward_std) for g in groups]
    published = [r.event for r in read_topic(kafka_ns, "adapter-events") if isinstance(r.event, R.AdapterPublished)]
    assert any(p.version == 1 for p in published)
    print(f"vLLM run: {len(rollouts)} rollouts all answered, {len(trained)} of {len(groups)} groups trained "
          f"(reward std {[round(g.reward_std, 3) for g in trained]}), {len(actions)} planner actions")
    rollout_log = next(home.glob("runs/*/logs/rollout-0.log")).read_text()
    assert "adapter planner@v1 loaded on vLLM" in rollout_log
    summary = json.loads((next(home.glob("runs/*/report")) / "summary.json").read_text())
    assert summary["serving_version"] >= 1 and summary["restarts"]["vllm"] == 0

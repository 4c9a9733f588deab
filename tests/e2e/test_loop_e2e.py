"""The whole loop on SmolLM2, as a user runs it (`streamgrpo run`), checked from the events.

Bounded: stops as soon as a rollout served by adapter v1 completed (`--until-version 1`), or
after the duration (then the assertions say what did not happen). GRPO alone (`--demos none`): the warm start's
demonstrations would take most of the duration before v1 served a policy rollout; they have their own tests
(tests/integration/test_demonstrations_loop.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.model, pytest.mark.timeout(1500)]


def test_run_publishes_adapters_and_the_worker_switches(kafka_ns: KafkaSettings, tmp_path: Path, model_cache: Path) -> None:
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(
        f'[kafka]\ntopic_prefix = "{kafka_ns.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f"[loop]\nmax_turns = 2\nsamples_per_step = 4\nmodel_cache = \"{model_cache}\"\n\n"
        "[streams]\nmax_new_tokens = 40\ngroup_timeout_s = 300.0\n\n"
        "[trainer]\npublish_every = 1\n\n"
        f'[rollout]\nconcurrency = 1\n'
    )
    home = tmp_path / "home"
    env = dict(os.environ, STREAMGRPO_CONFIG=str(cfg))
    env.pop("STREAMGRPO_BOOTSTRAP", None)
    proc = subprocess.run(
        [sys.executable, "-m", "streamgrpo.cli", "run", "--bootstrap", kafka_ns.bootstrap or "", "--home", str(home),
         "--duration", "1200", "--until-version", "1", "--limit", "40", "--group-size", "4", "--demos", "none"],
        env=env, capture_output=True, text=True, timeout=1400,
    )
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(home.glob("runs/*/logs/*.log")))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs
    assert "stopping (--until-version)" in proc.stdout, proc.stdout[-3000:] + logs

    published = [r.event for r in read_topic(kafka_ns, "adapter-events") if isinstance(r.event, R.AdapterPublished)]
    assert published, "no adapter was published"
    samples = read_topic(kafka_ns, "training-samples")
    assert len({r.event.event_id for r in samples}) >= 4
    from streamgrpo.models.adapter_store import sha256_dir

    first = published[0]
    assert first.version == 1 and first.parent_version in (None, 0)
    assert sha256_dir(Path(first.uri.removeprefix("file://"))) == first.sha256
    assert first.lineage and all(r.topic.endswith("training-samples") and r.end >= r.start for r in first.lineage)
    trained = sum(r.end - r.start + 1 for r in first.lineage)
    assert trained >= 4  # at least one optimizer step of samples

    actions = [r.event for r in read_topic(kafka_ns, "planner-actions")]
    assert any(a.adapter_version >= 1 for a in actions), "the rollout worker never served the new adapter"
    assert all(len(a.action_token_ids) == len(a.behaviour_logprobs) > 0 for a in actions)

    report = next(home.glob("runs/*/report"))
    assert (report / "reward_per_version.png").stat().st_size > 1000
    summary = json.loads((report / "summary.json").read_text())
    assert summary["adapters_published"] >= 1 and summary["serving_version"] >= 1

"""Every service's metrics endpoint during a real loop: the key series move as events flow.

`streamgrpo run` (embedded broker of the test session, streams, judge, one rollout worker, trainer)
serves the tiny planner of :mod:`support.tiny_planner` with each service's ``metrics_port`` set to a
free port. The test scrapes every endpoint with :func:`streamgrpo.metrics.read_endpoint` until each
service's key counters are above zero (moment 1), then until every one of them has grown past its
moment-1 value (moment 2): rollouts, planner actions and tokens, tool calls (rollout); rewards and
judge latency observations (judge); groups requested and closed, training samples, reward scores,
events consumed (streams); trainer steps, samples, tokens, publish latency observations (trainer).
Gauges that only mean something once the loop turned (the trained and served adapter versions, the
published version) must be at least 1 by then. While the loop runs, `streamgrpo status --json`
reports all four services up, with the groups in flight taken from the streams endpoint.

What is not covered: Grafana itself (the dashboard's queries are checked against the catalogue in
``tests/unit/test_k8s_dashboard.py``); lag gauges (they depend on timing, not on events).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.tiny_planner import QUESTIONS, build_tiny_planner

from streamgrpo import metrics as M
from streamgrpo.cli import cli
from streamgrpo.config import KafkaSettings

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(900)]

#: Counters (sum over their labels) that must be above zero at moment 1 and grow by moment 2.
MOVING: dict[str, tuple[str, ...]] = {
    "rollout": ("streamgrpo_rollouts_total", "streamgrpo_planner_actions_total", "streamgrpo_planner_tokens_total",
                "streamgrpo_rollout_duration_seconds_count", "streamgrpo_events_produced_total"),
    "judge": ("streamgrpo_judge_rewards_total", "streamgrpo_judge_duration_seconds_count",
              "streamgrpo_events_consumed_total"),
    "streams": ("streamgrpo_groups_requested_total", "streamgrpo_groups_closed_total",
                "streamgrpo_training_samples_total", "streamgrpo_reward_score_count",
                "streamgrpo_events_consumed_total"),
    "trainer": ("streamgrpo_trainer_steps_total", "streamgrpo_trainer_samples_total",
                "streamgrpo_trainer_tokens_total", "streamgrpo_adapter_publish_duration_seconds_count"),
}
#: Gauges that are >= 1 once an adapter was published and served.
TURNED: dict[str, tuple[str, dict[str, str]]] = {
    "trainer": ("streamgrpo_adapter_version", {"role": "trained"}),
    "streams": ("streamgrpo_adapter_version", {"role": "published"}),
    "rollout": ("streamgrpo_adapter_version", {"role": "served"}),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _total(reading: M.Reading, name: str) -> float:
    return sum(v for _, v in reading.series(name))


def _scrape(targets: dict[str, str]) -> dict[str, dict[str, float]]:
    out = {}
    for service, target in targets.items():
        reading = M.read_endpoint(target, timeout_s=2.0)
        out[service] = {name: _total(reading, name) for name in MOVING[service]} if reading.up else {}
        if reading.up and service in TURNED:
            name, labels = TURNED[service]
            out[service]["turned"] = reading.get(name, **labels) or 0.0
    return out


def _wait(targets: dict[str, str], proc: subprocess.Popen[str], until: float, done: object) -> dict[str, dict[str, float]]:
    """Scrape every 2 s until ``done(values)`` holds; fail when the run exits or ``until`` passes."""
    values: dict[str, dict[str, float]] = {}
    while time.monotonic() < until:
        assert proc.poll() is None, f"streamgrpo run exited ({proc.returncode}) before the series moved: {values}"
        values = _scrape(targets)
        if done(values):  # type: ignore[operator]
            return values
        time.sleep(2.0)
    pytest.fail(f"the series did not move in time: {values}")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_planner(path)
    return path


def test_each_services_series_move_while_the_loop_runs(kafka_ns: KafkaSettings, tmp_path: Path,
                                                       tiny_base: Path) -> None:
    ports = {s: _free_port() for s in M.SERVICES}
    targets = {s: f"127.0.0.1:{p}" for s, p in ports.items()}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": a, "source": "math"}) + "\n"
                             for q, a in QUESTIONS * 40))
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(
        f'[kafka]\ntopic_prefix = "{kafka_ns.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f'[rollout]\nmodel = "{tiny_base}"\nmetrics_port = {ports["rollout"]}\n\n'
        f'[trainer]\nbase_model = "{tiny_base}"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = {ports["trainer"]}\n\n'
        f'[streams]\nmetrics_port = {ports["streams"]}\n\n[judge]\nmetrics_port = {ports["judge"]}\n\n'
        "[evaluator]\nenabled = false\n")
    env = dict(os.environ, STREAMGRPO_CONFIG=str(cfg))
    env.pop("STREAMGRPO_BOOTSTRAP", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamgrpo.cli", "run", "--bootstrap", kafka_ns.bootstrap or "", "--home",
         str(tmp_path / "home"), "--tasks", str(tasks), "--duration", "600", "--group-size", "8", "--no-final-eval"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        first = _wait(targets, proc, deadline, lambda v: all(
            v.get(s) and all(v[s][n] > 0 for n in names) for s, names in MOVING.items()))
        second = _wait(targets, proc, deadline, lambda v: all(
            v.get(s) and all(v[s][n] > first[s][n] for n in names) for s, names in MOVING.items())
            and all(v[s]["turned"] >= 1 for s in TURNED))
        status = CliRunner().invoke(cli, ["status", "--json", "--timeout", "2"], env={
            "STREAMGRPO_CONFIG": str(cfg), "STREAMGRPO_KAFKA__BOOTSTRAP": kafka_ns.bootstrap or ""})
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(tmp_path.glob("home/runs/*/logs/*.log")))
    assert second, out[-3000:] + logs
    assert status.exit_code == 0, status.output
    report = json.loads(status.output)
    assert {s["service"]: s["up"] for s in report["services"]} == dict.fromkeys(M.SERVICES, True), report["services"]
    assert report["groups_source"] == "streams endpoint", report
    assert report["versions"]["published"] >= 1, report

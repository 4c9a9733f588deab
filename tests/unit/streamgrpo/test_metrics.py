"""streamgrpo.metrics: the catalogue follows Prometheus conventions, labels stay bounded, the endpoint
serves what was recorded, and importing the module pulls in no prometheus_client."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import urllib.request

import pytest

from streamgrpo import metrics as M

NAME = re.compile(r"^streamgrpo_[a-z][a-z0-9_]*[a-z0-9]$")
UNITS = ("_seconds", "_records", "_ratio", "_versions", "_total")


def test_names_follow_prometheus_conventions() -> None:
    names = [s.name for s in M.METRICS]
    assert len(names) == len(set(names)), "a metric is defined twice"
    for s in M.METRICS:
        assert NAME.match(s.name), s.name
        assert (s.kind is M.Kind.COUNTER) == s.name.endswith("_total"), f"{s.name}: _total is for counters only"
        assert not re.search(r"_(ms|milliseconds|minutes|hours|bytes_kb|percent)(_|$)", s.name), f"{s.name}: base units"
        if s.kind is M.Kind.HISTOGRAM:
            assert s.buckets and list(s.buckets) == sorted(s.buckets), s.name
        if "duration" in s.name or "latency" in s.name or "age" in s.name:
            assert s.name.endswith("_seconds"), f"{s.name}: times are in seconds"
        assert s.help and s.services, s.name
        assert all(x in (*M.SERVICES, "*") for x in s.services), s.name


def test_labels_are_bounded_and_never_ids() -> None:
    for s in M.METRICS:
        assert len(s.label_names) == len(set(s.label_names)), s.name
        for label in s.labels:
            assert label.name not in M.FORBIDDEN_LABELS, f"{s.name}{{{label.name}}} would be unbounded"
            assert not label.name.endswith("_id"), f"{s.name}{{{label.name}}}: ids are never labels"
            assert bool(label.values) != bool(label.max_values), f"{s.name}{{{label.name}}}: closed set XOR a cap"
            assert 2 <= label.bounded() <= 65, f"{s.name}{{{label.name}}}"
            assert M.OTHER not in label.values
        series = 1
        for label in s.labels:
            series *= label.bounded()
        assert series <= 20_000, f"{s.name}: up to {series} series"


def test_issue_list_is_covered() -> None:
    """Every metric the operations issue asks for has a name here (a dashboard panel reads each)."""
    wanted = {
        "rollouts/s": "streamgrpo_rollouts_total", "planner tokens/s": "streamgrpo_planner_tokens_total",
        "parse failures": "streamgrpo_planner_actions_total", "tool calls and errors": "streamgrpo_tool_calls_total",
        "served version": "streamgrpo_adapter_version", "judge latency": "streamgrpo_judge_duration_seconds",
        "judge cache": "streamgrpo_judge_cache_requests_total", "rewards per version": "streamgrpo_reward_mean",
        "groups open": "streamgrpo_groups_open", "groups closed/timed out": "streamgrpo_groups_closed_total",
        "sample lag": "streamgrpo_trainer_sample_age_seconds",
        "step time": "streamgrpo_trainer_step_duration_seconds", "trainer tokens": "streamgrpo_trainer_tokens_total",
        "loss": "streamgrpo_trainer_loss", "kl": "streamgrpo_trainer_kl", "clip": "streamgrpo_trainer_clip_ratio",
        "drops": "streamgrpo_trainer_samples_dropped_total",
        "publish latency": "streamgrpo_adapter_publish_duration_seconds",
        "dlq": "streamgrpo_dead_letters_total", "consumer lag": "streamgrpo_consumer_lag_records",
        "held-out accuracy": "streamgrpo_eval_accuracy_ratio",
    }
    assert set(wanted.values()) <= set(M.spec_by_name())
    assert M.spec_by_name()["streamgrpo_consumer_lag_records"].label_names == ("group", "topic", "partition")


def test_import_does_not_pull_prometheus_client() -> None:
    code = "import sys, streamgrpo.metrics, streamgrpo.topics.producer; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_values_and_label_bounds() -> None:
    m = M.Metrics("rollout")
    m.inc(M.ROLLOUTS, status="ANSWERED")
    m.inc(M.ROLLOUTS, status="answered")
    m.inc(M.ROLLOUTS, status="exploded")  # not in the closed set
    assert m.value("streamgrpo_rollouts_total", status="answered") == 2
    assert m.value("streamgrpo_rollouts_total", status="other") == 1
    cap = M.TOOL_CALLS.labels[0].max_values
    for i in range(cap + 5):
        m.inc(M.TOOL_CALLS, tool=f"tool{i}", outcome="ok")
    assert m.value("streamgrpo_tool_calls_total", tool="tool0", outcome="ok") == 1
    assert m.value("streamgrpo_tool_calls_total", tool="other", outcome="ok") == 5
    with pytest.raises(ValueError, match="takes labels"):
        m.inc(M.ROLLOUTS)
    with m.timer(M.JUDGE_DURATION, judge="math"):
        pass
    assert m.value("streamgrpo_judge_duration_seconds_count", judge="math") == 1
    m.set(M.ADAPTER_VERSION, 7, role="served")
    assert m.value("streamgrpo_adapter_version", role="served") == 7
    assert m.value("streamgrpo_service_info", service="rollout", release=__import__("streamgrpo").__version__) == 1


def test_disabled_metrics_are_noops() -> None:
    m = M.Metrics(enabled=False)
    m.inc(M.ROLLOUTS, status="answered")
    m.inc(M.ROLLOUTS)  # labels are not even checked: nothing is recorded
    assert m.value("streamgrpo_rollouts_total", status="answered") is None
    assert M.current().enabled is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_endpoint_serves_metrics_status_and_last_error() -> None:
    port = _free_port()
    m = M.start("judge", port, host="127.0.0.1")
    try:
        assert M.current() is m and m.port == port
        M.current().inc(M.JUDGE_CACHE, result="hit")
        logging.getLogger("streamgrpo.judge.test").error("scorer failed\nsecond line")
        reading = M.read_endpoint(f"127.0.0.1:{port}")
        assert reading.up, reading.error
        assert reading.get("streamgrpo_judge_cache_requests_total", result="hit") == 1
        assert reading.get("streamgrpo_log_records_total", level="error") == 1
        assert (reading.get("process_start_time_seconds") or 0) > 0
        assert reading.status["service"] == "judge"
        assert reading.status["last_error"]["message"] == "scorer failed"
        assert reading.get("streamgrpo_last_error_timestamp_seconds") == pytest.approx(
            reading.status["last_error"]["time"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
        # a second service on the same port: logged, not fatal
        other = M.Metrics("judge")
        assert other.serve(port, "127.0.0.1") is None
    finally:
        M.stop()
    assert M.current().enabled is False
    down = M.read_endpoint(f"127.0.0.1:{port}", timeout_s=0.5)
    assert not down.up and down.error
    assert not M.read_endpoint("no port here").up


def test_port_zero_records_without_endpoint() -> None:
    m = M.start("trainer", 0)
    try:
        assert m.enabled and m.port is None
        m.inc(M.TRAINER_STEPS)
        assert m.value("streamgrpo_trainer_steps_total") == 1
    finally:
        M.stop()


@pytest.mark.parametrize("module, model, service", [
    ("streamgrpo.streams.config", "StreamsSettings", "streams"),
    ("streamgrpo.judge.config", "JudgeSettings", "judge"),
    ("streamgrpo.rollout.config", "RolloutConfig", "rollout"),
    ("streamgrpo.trainer.config", "TrainerConfig", "trainer"),
])
def test_each_service_has_a_default_metrics_port(module: str, model: str, service: str) -> None:
    import importlib

    settings = getattr(importlib.import_module(module), model)()
    assert settings.metrics_port == M.DEFAULT_PORTS[service] > 0
    assert len(set(M.DEFAULT_PORTS.values())) == len(M.SERVICES)

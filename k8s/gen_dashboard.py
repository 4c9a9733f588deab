"""Generate the Grafana dashboard ``k8s/base/monitoring/streamgrpo-dashboard.json`` from code.

Three rows, each panel a PromQL query over the metrics of ``streamgrpo.metrics`` (the one
catalogue of names and labels):

- **Learning**: reward mean and success ratio per A/B arm, held-out accuracy (with its CI) of the
  newest evaluated version and of the primary, adapter versions per role and served per worker,
  trainer loss / KL / clip ratio.
- **Flow**: consumer lag per group (the services' own and, where Strimzi's Kafka Exporter runs, the
  broker's), throughput per stage, groups in flight, tokens/s, latencies (judge, planner, trainer
  step, adapter publish and load), sample age and staleness, judge cache hit ratio, admission.
- **Health**: dead letters by reason, ERROR log records and restarts per service, endpoints up,
  heartbeat age, parse failures, tool errors, rollouts ending in error, trainer drops by reason.

Adapter versions are never labels (unbounded): a version is the VALUE of
``streamgrpo_adapter_version{role}``, and accuracy per version is read by plotting
``streamgrpo_eval_accuracy_ratio{role="evaluated"}`` beside ``streamgrpo_adapter_version{role="evaluated"}``.
Per-service panels join on ``streamgrpo_service_info`` by ``instance``, so they work with the
PodMonitor and with plain annotation scraping alike.

Usage::

    python k8s/gen_dashboard.py            # rewrite the JSON
    python k8s/gen_dashboard.py --check    # exit 1 if the checked-in file differs

``tests/unit/test_k8s_dashboard.py`` regenerates it and checks every query against the catalogue.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "base" / "monitoring" / "streamgrpo-dashboard.json"
UID = "streamgrpo-overview"
#: Series a query may use that streamgrpo does not define: Prometheus' own `up`, and the broker-side
#: lag of Strimzi's Kafka Exporter (k8s/components/prometheus-operator).
EXTERNAL_SERIES = {"up", "kafka_consumergroup_lag"}
BY_SERVICE = "* on (instance) group_left (service) streamgrpo_service_info"
W = "[5m]"


def _panel(title: str, targets: list[tuple[str, str]], unit: str = "short", kind: str = "timeseries",
           description: str = "") -> dict[str, Any]:
    return {"type": kind, "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (expr, legend) in enumerate(targets)]}


def _rate(series: str, by: str = "") -> str:
    return f"sum{f' by ({by})' if by else ''} (rate({series}{W}))"


def _p(q: float, hist: str, by: str = "") -> str:
    extra = f", {by}" if by else ""
    return f"histogram_quantile({q}, sum by (le{extra}) (rate({hist}_bucket{W})))"


LEARNING = [
    _panel("Reward mean per arm (last closed window)", [("streamgrpo_reward_mean", "{{arm}}")],
           description="Mean reward of the primary and canary versions (streams metrics windows)."),
    _panel("Reward success ratio per arm", [("streamgrpo_reward_success_ratio", "{{arm}}")], "percentunit"),
    _panel("Held-out accuracy", [
        ('streamgrpo_eval_accuracy_ratio{bound="point"}', "{{role}}"),
        ('streamgrpo_eval_accuracy_ratio{bound="ci_low"}', "{{role}} CI low"),
        ('streamgrpo_eval_accuracy_ratio{bound="ci_high"}', "{{role}} CI high"),
    ], "percentunit", description="EvaluationCompleted: the newest evaluated version and the primary "
                                  "(which version: the panel beside)."),
    _panel("Adapter versions", [
        ('max by (role) (streamgrpo_adapter_version{role=~"published|primary|canary|evaluated|trained"})', "{{role}}"),
    ], description="A version is the value, never a label."),
    _panel("Version served per worker", [('streamgrpo_adapter_version{role="served"}', "{{instance}}")]),
    _panel("Trainer loss and KL", [("streamgrpo_trainer_loss", "loss"), ("streamgrpo_trainer_kl", "KL")]),
    _panel("Trainer clip ratio", [("streamgrpo_trainer_clip_ratio", "clipped tokens")], "percentunit"),
    _panel("Reward score distribution (p50 / p90)", [
        (_p(0.5, "streamgrpo_reward_score", "arm"), "p50 {{arm}}"),
        (_p(0.9, "streamgrpo_reward_score", "arm"), "p90 {{arm}}"),
    ]),
]

FLOW = [
    _panel("Consumer lag per group (records)", [
        ("sum by (group, topic) (streamgrpo_consumer_lag_records)", "{{group}} / {{topic}}"),
        ("sum by (consumergroup, topic) (kafka_consumergroup_lag)", "broker: {{consumergroup}} / {{topic}}"),
    ], description="What KEDA scales rollout and judge on."),
    _panel("Throughput per stage (per second)", [
        (_rate("streamgrpo_groups_requested_total"), "groups requested"),
        (_rate("streamgrpo_rollouts_total"), "rollouts"),
        (_rate("streamgrpo_judge_rewards_total"), "rewards"),
        (_rate("streamgrpo_groups_closed_total"), "groups closed"),
        (_rate("streamgrpo_training_samples_total"), "samples emitted"),
        (_rate("streamgrpo_trainer_samples_total"), "samples trained"),
        (_rate("streamgrpo_trainer_steps_total"), "trainer steps"),
    ], "ops"),
    _panel("Events produced per topic", [(_rate("streamgrpo_events_produced_total", "topic"), "{{topic}}")], "ops"),
    _panel("Groups in flight", [("sum(streamgrpo_groups_open)", "open"),
                                ("max(streamgrpo_admission_blocked)", "admission blocked"),
                                ("max(streamgrpo_stalled)", "STALLED (liveness_s)")]),
    _panel("Groups closed by status", [(_rate("streamgrpo_groups_closed_total", "status, trains"),
                                        "{{status}} trains={{trains}}")], "ops"),
    _panel("Tokens per second", [(_rate("streamgrpo_planner_tokens_total"), "planner (generated)"),
                                 (_rate("streamgrpo_trainer_tokens_total"), "trainer")], "ops"),
    _panel("Judge latency (p50 / p95)", [(_p(0.5, "streamgrpo_judge_duration_seconds", "judge"), "p50 {{judge}}"),
                                         (_p(0.95, "streamgrpo_judge_duration_seconds", "judge"), "p95 {{judge}}")], "s"),
    _panel("Judge cache hit ratio", [(_rate('streamgrpo_judge_cache_requests_total{result="hit"}') + " / "
                                      + _rate("streamgrpo_judge_cache_requests_total"), "hit ratio")], "percentunit"),
    _panel("Planner action and rollout latency (p95)", [
        (_p(0.95, "streamgrpo_planner_action_duration_seconds"), "planner action"),
        (_p(0.95, "streamgrpo_rollout_duration_seconds"), "rollout"),
    ], "s"),
    _panel("Trainer step time and sample lag", [
        (_p(0.5, "streamgrpo_trainer_step_duration_seconds"), "step p50"),
        (_p(0.95, "streamgrpo_trainer_sample_age_seconds"), "sample age p95"),
    ], "s"),
    _panel("Sample staleness (versions, p95)", [(_p(0.95, "streamgrpo_trainer_sample_staleness_versions"), "p95")]),
    _panel("Adapter publish and load latency (p95)", [
        (_p(0.95, "streamgrpo_adapter_publish_duration_seconds"), "publish (trainer)"),
        (_p(0.95, "streamgrpo_adapter_load_duration_seconds"), "load (workers)"),
    ], "s"),
]

HEALTH = [
    _panel("Dead letters by reason (last hour)", [
        ("sum by (reason) (increase(streamgrpo_dead_letters_total[1h]))", "{{reason}}")]),
    _panel("ERROR log records per service", [
        (f'sum by (service) (rate(streamgrpo_log_records_total{{level="error"}}{W}) {BY_SERVICE})', "{{service}}")],
        "ops"),
    _panel("Restarts per service (last hour)", [
        (f"sum by (service) (changes(process_start_time_seconds[1h]) {BY_SERVICE})", "{{service}}")]),
    _panel("Endpoints up", [(f"sum by (service) (up {BY_SERVICE})", "{{service}}")], kind="stat"),
    _panel("Heartbeat age per worker", [
        ("time() - streamgrpo_heartbeat_timestamp_seconds", "{{instance}}")], "s",
        description="The liveness probe restarts a worker whose heartbeat is older than its --max-age."),
    _panel("Parse failure ratio", [(_rate('streamgrpo_planner_actions_total{parse_status="failed"}') + " / "
                                    + _rate("streamgrpo_planner_actions_total"), "failed")], "percentunit"),
    _panel("Tool errors per tool", [(_rate('streamgrpo_tool_calls_total{outcome="error"}', "tool"), "{{tool}}")],
           "ops"),
    _panel("Rollouts by status", [(_rate("streamgrpo_rollouts_total", "status"), "{{status}}")], "ops"),
    _panel("Trainer drops by reason", [(_rate("streamgrpo_trainer_samples_dropped_total", "reason"), "{{reason}}")],
           "ops"),
    _panel("Adapter loads by outcome", [(_rate("streamgrpo_adapter_loads_total", "outcome"), "{{outcome}}")], "ops"),
]

ROWS = (("Learning", LEARNING), ("Flow", FLOW), ("Health", HEALTH))


def _layout() -> list[dict[str, Any]]:
    """Rows and panels with grid positions (two panels per line, 12 columns each)."""
    panels: list[dict[str, Any]] = []
    y, pid = 0, 1
    for title, row in ROWS:
        panels.append({"type": "row", "title": title, "id": pid, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y = pid + 1, y + 1
        for i, panel in enumerate(row):
            panels.append({**panel, "id": pid, "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)}})
            pid += 1
        y += 8 * ((len(row) + 1) // 2)
    return panels


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID, "title": "streamgrpo", "tags": ["streamgrpo"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []},
        "panels": _layout(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=1, sort_keys=True) + "\n"


def queries() -> list[str]:
    """Every PromQL expression of the dashboard."""
    return [t["expr"] for _, row in ROWS for p in row for t in p["targets"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in JSON differs")
    args = parser.parse_args(argv)
    if args.check:
        same = OUT.is_file() and OUT.read_text() == render()
        print("dashboard: in sync" if same else f"dashboard: {OUT} differs (run `python k8s/gen_dashboard.py`)")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

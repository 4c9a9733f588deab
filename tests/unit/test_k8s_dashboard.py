"""The Grafana dashboard: generated file in sync, every query reads only catalogued series with
declared labels and allowed values, the three views are there, and the ConfigMap ships it."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from streamgrpo import metrics as M

K8S = Path(__file__).resolve().parents[2] / "k8s"
_spec = importlib.util.spec_from_file_location("k8s_gen_dashboard", K8S / "gen_dashboard.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
sys.modules["k8s_gen_dashboard"] = gen
_spec.loader.exec_module(gen)

SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*')
GROUPING = re.compile(r"\b(by|on|without|group_left|group_right|ignoring)\s*\([^)]*\)")
IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:]|\s*\()")


def series_used(expr: str) -> tuple[set[str], list[tuple[str, str, str, str]]]:
    """(series names, [(series, label, op, value)]) of one PromQL expression."""
    matchers = []
    for name, body in SELECTOR.findall(expr):
        for part in filter(str.strip, body.split(",")):
            m = MATCHER.fullmatch(part)
            assert m, f"cannot parse matcher {part!r} in {expr}"
            matchers.append((name, m.group(1), m.group(2), m.group(3)))
    bare = SELECTOR.sub(r"\1", expr)
    bare = GROUPING.sub(" ", bare)
    bare = re.sub(r"\[[0-9]+[smhd]\]", "", bare)
    names = {n for n in IDENT.findall(bare) if not re.fullmatch(r"[0-9.]+", n)}
    return names, matchers


def test_parser_finds_series_and_matchers() -> None:
    names, matchers = series_used('sum by (le, arm) (rate(streamgrpo_reward_score_bucket{arm="canary"}[5m])) '
                                  "* on (instance) group_left (service) streamgrpo_service_info - time()")
    assert names == {"streamgrpo_reward_score_bucket", "streamgrpo_service_info"}
    assert matchers == [("streamgrpo_reward_score_bucket", "arm", "=", "canary")]


def test_dashboard_file_is_generated() -> None:
    assert gen.main(["--check"]) == 0, "run `python k8s/gen_dashboard.py`"


@pytest.mark.parametrize("expr", gen.queries())
def test_every_query_uses_catalogued_series_and_labels(expr: str) -> None:
    known = M.series_names() | gen.EXTERNAL_SERIES | {"process_start_time_seconds"}
    names, matchers = series_used(expr)
    assert names, expr
    assert names <= known, f"unknown series {names - known} in {expr}"
    specs = {n: s for s in M.METRICS for n in s.series_names()}
    for series, label, op, value in matchers:
        spec = specs[series]
        declared = {lb.name: lb for lb in spec.labels}
        assert label in declared, f"{series} has no label {label!r}"
        if declared[label].values and op in ("=", "=~"):
            for v in value.split("|"):
                assert v in declared[label].values, f"{series}{{{label}}} never takes {v!r}"


def test_three_views_cover_the_issue() -> None:
    board = json.loads(gen.OUT.read_text())
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Learning", "Flow", "Health"]
    text = " ".join(gen.queries())
    for needed in ("streamgrpo_reward_mean", "streamgrpo_eval_accuracy_ratio", "streamgrpo_consumer_lag_records",
                   "streamgrpo_rollouts_total", "streamgrpo_dead_letters_total", "process_start_time_seconds",
                   "streamgrpo_log_records_total"):
        assert needed in text, needed
    used = set().union(*(series_used(q)[0] for q in gen.queries()))
    # every catalogued metric is on the board (a metric nobody looks at is not worth exporting)
    missing = {s.name for s in M.METRICS if not set(s.series_names()) & used} - {
        "streamgrpo_events_consumed_total", "streamgrpo_last_error_timestamp_seconds", "streamgrpo_adapters_resident"}
    assert missing == set()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_configmap_ships_the_dashboard() -> None:
    import yaml

    k = yaml.safe_load((K8S / "base" / "monitoring" / "kustomization.yaml").read_text())
    gen_cm = k["configMapGenerator"][0]
    assert gen_cm["files"] == [gen.OUT.name]
    assert gen_cm["options"]["labels"]["grafana_dashboard"] == "1"
    assert "monitoring" in yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())["resources"]

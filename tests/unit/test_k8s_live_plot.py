"""k8s/plot_live_metrics.py: every panel reads catalogued series; rates, interval means and gaps are computed
from real endpoint scrapes (two :class:`streamgrpo.metrics.Metrics` served on free ports); the PNG is written."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from streamgrpo import metrics as M

K8S = Path(__file__).resolve().parents[2] / "k8s"
_spec = importlib.util.spec_from_file_location("k8s_plot_live_metrics", K8S / "plot_live_metrics.py")
assert _spec and _spec.loader
plot = importlib.util.module_from_spec(_spec)
sys.modules["k8s_plot_live_metrics"] = plot
_spec.loader.exec_module(plot)


def test_panels_read_catalogued_series_of_the_right_service() -> None:
    specs = M.spec_by_name()
    for _, lines in plot.PANELS:
        for _, service, name, kind, labels in lines:
            spec = specs[name]
            assert service in spec.services, (name, service)
            assert set(labels) <= set(spec.label_names), (name, labels)
            assert (kind == "rate") == (spec.kind is M.Kind.COUNTER), name
            assert (kind == "ratio") == (spec.kind is M.Kind.HISTOGRAM), name


def test_rates_means_and_gaps_from_real_scrapes(tmp_path: Path) -> None:
    rollout, streams = M.Metrics("rollout"), M.Metrics("streams")
    try:
        targets = {"rollout": f"127.0.0.1:{rollout.serve(0, '127.0.0.1')}",
                   "streams": f"127.0.0.1:{streams.serve(0, '127.0.0.1')}"}
        snaps = [plot.scrape(targets)]
        rollout.inc(M.ROLLOUTS, 3, status="answered")
        rollout.inc(M.ROLLOUTS, 1, status="error")
        streams.observe(M.REWARD_SCORE, 1.0, arm="primary")
        streams.observe(M.REWARD_SCORE, 0.0, arm="canary")
        streams.set(M.GROUPS_OPEN, 2)
        snaps.append(plot.scrape(targets))
        snaps.append(plot.scrape(targets))  # nothing happened in this interval
    finally:
        rollout.close()
        streams.close()
    for i, snap in enumerate(snaps):
        snap["t"] = 100.0 + 10 * i
    assert "process_cpu_seconds_total" not in snaps[1]["rollout"]  # only the series the panels draw are kept
    _, rates = plot.series(snaps, "rollout", "streamgrpo_rollouts_total", "rate", {})
    assert rates == [0.4, 0.0]  # 4 rollouts (both statuses) in 10 s, then none
    _, means = plot.series(snaps, "streams", "streamgrpo_reward_score", "ratio", {})
    assert means[0] == 0.5 and math.isnan(means[1])  # the mean over both arms; a gap when nothing was scored
    xs, groups = plot.series(snaps, "streams", "streamgrpo_groups_open", "gauge", {})
    assert groups == [2.0, 2.0] and xs == [10 / 60, 20 / 60]
    out = tmp_path / "live.png"
    plot.plot(snaps, out, plot._title("test", 10))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

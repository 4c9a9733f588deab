"""Plot the dashboard's key series from a real run: the picture in the README's deployment section.

Grafana does not run here, so this draws a few of the series the Grafana dashboard
(``k8s/base/monitoring/streamgrpo-dashboard.json``) shows, with the same definitions (rates of the
same counters, the same gauges), from a real ``streamgrpo run``: it starts the run (every service
serves its metrics endpoint on its ``metrics_port``), scrapes each endpoint every ``--interval``
seconds with :func:`streamgrpo.metrics.read_endpoint`, and when the run ends writes a PNG (and the
raw scrapes as JSON next to it). It is a plot of the same series, not a Grafana screenshot.

Usage::

    python k8s/plot_live_metrics.py --duration 480 --out docs/live_metrics.png [-- <streamgrpo run options>]
    python k8s/plot_live_metrics.py --replot docs/live_metrics.json --out docs/live_metrics.png --what "..."

Settings come from ``$STREAMGRPO_CONFIG`` like every service's (the endpoints are read on 127.0.0.1
at each service's ``metrics_port``). What is not covered: several workers of one service (only the
one that holds the port is scraped), Kafka-side lag (the dashboard reads it from Kafka Exporter).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from streamgrpo import metrics as M

#: (panel title, service, series, kind): kind "rate" = per-second rate of a counter summed over its labels,
#: "gauge" = the value (labels given), "ratio" = rate of <series>_sum over rate of <series>_count.
PANELS: list[tuple[str, list[tuple[str, str, str, str, dict[str, str]]]]] = [
    ("Throughput (per second)", [
        ("rollouts", "rollout", "streamgrpo_rollouts_total", "rate", {}),
        ("rewards", "judge", "streamgrpo_judge_rewards_total", "rate", {}),
        ("training samples", "streams", "streamgrpo_training_samples_total", "rate", {}),
    ]),
    ("Tokens per second", [
        ("planner tokens/s", "rollout", "streamgrpo_planner_tokens_total", "rate", {}),
        ("trainer tokens/s", "trainer", "streamgrpo_trainer_tokens_total", "rate", {}),
    ]),
    ("Reward (mean score per interval)", [
        ("reward score", "streams", "streamgrpo_reward_score", "ratio", {}),
    ]),
    ("Groups in flight", [
        ("groups open", "streams", "streamgrpo_groups_open", "gauge", {}),
        ("admission blocked", "streams", "streamgrpo_admission_blocked", "gauge", {}),
    ]),
    ("Adapter versions", [
        ("published", "streams", "streamgrpo_adapter_version", "gauge", {"role": "published"}),
        ("trained", "trainer", "streamgrpo_adapter_version", "gauge", {"role": "trained"}),
        ("served (worker)", "rollout", "streamgrpo_adapter_version", "gauge", {"role": "served"}),
    ]),
    ("Trainer loss / clip ratio", [
        ("loss", "trainer", "streamgrpo_trainer_loss", "gauge", {}),
        ("clip ratio", "trainer", "streamgrpo_trainer_clip_ratio", "gauge", {}),
    ]),
]


#: The series the panels read (only these are kept in the saved scrapes).
WANTED = {f"{name}{suffix}" for _, lines in PANELS for _, _, name, kind, _ in lines
          for suffix in (("_sum", "_count") if kind == "ratio" else ("",))}


def scrape(targets: dict[str, str]) -> dict[str, Any]:
    """One scrape of every endpoint: {service: {series: [[labels, value], ...]}} for the :data:`WANTED` series
    (None when the endpoint is down)."""
    out: dict[str, Any] = {"t": time.time()}
    for service, target in targets.items():
        reading = M.read_endpoint(target, timeout_s=2.0)
        out[service] = None if not reading.up else {
            name: [[dict(lbl), v] for (n, lbl), v in reading.samples.items() if n == name]
            for name in {n for n, _ in reading.samples} & WANTED}
    return out


def _value(snap: dict[str, Any], service: str, name: str, labels: dict[str, str]) -> float | None:
    rows = (snap.get(service) or {}).get(name)
    if rows is None:
        return None
    chosen = [v for lbl, v in rows if all(lbl.get(k) == want for k, want in labels.items())]
    return sum(chosen) if chosen else None


def series(snaps: list[dict[str, Any]], service: str, name: str, kind: str,
           labels: dict[str, str]) -> tuple[list[float], list[float]]:
    """Time (minutes since the first scrape) and value of one line of a panel."""
    t0 = snaps[0]["t"] if snaps else 0.0
    xs, ys = [], []
    for prev, cur in zip(snaps, snaps[1:], strict=False):
        dt = max(1e-9, cur["t"] - prev["t"])
        if kind == "gauge":
            y = _value(cur, service, name, labels)
        elif kind == "rate":
            a, b = _value(prev, service, name, labels), _value(cur, service, name, labels)
            a = 0.0 if a is None and prev.get(service) is not None else a  # a labelled counter appears at its first event
            y = None if a is None or b is None else max(0.0, b - a) / dt
        else:
            y = _interval_mean(prev, cur, service, name, labels)
        if y is not None:
            xs.append((cur["t"] - t0) / 60)
            ys.append(y)
    return xs, ys


def _interval_mean(prev: dict[str, Any], cur: dict[str, Any], service: str, name: str,
                   labels: dict[str, str]) -> float | None:
    """Mean of a histogram's observations between two scrapes (NaN, a gap in the line, when there were none)."""
    up = prev.get(service) is not None  # a labelled histogram appears at its first observation
    s0, s1 = (_value(x, service, f"{name}_sum", labels) for x in (prev, cur))
    c0, c1 = (_value(x, service, f"{name}_count", labels) for x in (prev, cur))
    s0, c0 = (0.0 if up and s0 is None else s0), (0.0 if up and c0 is None else c0)
    if s0 is None or s1 is None or c0 is None or c1 is None:
        return None
    return (s1 - s0) / (c1 - c0) if c1 != c0 else float("nan")


def plot(snaps: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), sharex=True)
    for ax, (panel, lines) in zip(axes.flat, PANELS, strict=True):
        for label, service, name, kind, labels in lines:
            xs, ys = series(snaps, service, name, kind, labels)
            style = {"drawstyle": "steps-post"} if kind == "gauge" else {"marker": ".", "markersize": 4}
            ax.plot(xs, ys, label=label, **style)
        ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


def _title(what: str, interval: float) -> str:
    return (f"{what}\nthe dashboard's series, scraped from each service's /metrics every {interval:g} s "
            "(a matplotlib plot, not Grafana)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=420.0, help="Seconds the run lasts (streamgrpo run --duration).")
    p.add_argument("--interval", type=float, default=10.0, help="Seconds between scrapes.")
    p.add_argument("--out", type=Path, default=Path("docs/live_metrics.png"))
    p.add_argument("--replot", type=Path, default=None, help="Plot the scrapes of an earlier run (its JSON); run nothing.")
    p.add_argument("--what", default="streamgrpo run", help="What ran, for the title.")
    p.add_argument("run_args", nargs="*", help="Extra `streamgrpo run` options (after --).")
    args = p.parse_args(argv)
    if args.replot is not None:
        plot(json.loads(args.replot.read_text()), args.out, _title(args.what, args.interval))
        return 0
    from streamgrpo.cli.status import service_ports

    ports = service_ports(os.environ.get("STREAMGRPO_CONFIG") or None)
    targets = {s: f"127.0.0.1:{port}" for s, port in ports.items() if port}
    cmd = [sys.executable, "-m", "streamgrpo.cli", "run", "--duration", str(args.duration), "--no-final-eval",
           *args.run_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    snaps: list[dict[str, Any]] = []
    try:
        while proc.poll() is None:
            snap = scrape(targets)
            if any(snap[s] is not None for s in targets):
                snaps.append(snap)
            time.sleep(args.interval)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
    args.out.with_suffix(".json").write_text(json.dumps(snaps))
    plot(snaps, args.out, _title(args.what, args.interval))
    print(f"{len(snaps)} scrapes -> {args.out}")
    return 0 if snaps else 1


if __name__ == "__main__":
    sys.exit(main())

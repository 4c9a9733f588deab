"""The adapter view: one adapter name's lifecycle and per-version figures, folded from the log.

The lifecycle (status, parent, decision history) comes from the one registry fold of ``adapter-events``
(:mod:`streamgrpo.lifecycle.registry`); the live figures from the newest ``AdapterState`` of each version on the
compacted ``adapter-registry`` topic (the A/B controller's), or, without any, folded from ``rewards`` and
``evaluations`` (:class:`~streamgrpo.lifecycle.stats.Stats`). The events come from an :data:`EventSource`: the
broker (:func:`kafka_events`) or a finished run's Parquet archive (:func:`archive_events`).

Its readers: ``streamgrpo adapters`` (:mod:`streamgrpo.cli.adapters`, which renders it) and ``streamgrpo serve``'s
``adapters`` tool (:mod:`streamgrpo.serve.agent`), so a service below the command line need not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.lifecycle.adapter_state import adapter_state
from streamgrpo.lifecycle.registry import AdapterRegistry, Line
from streamgrpo.lifecycle.stats import SUCCESS_THRESHOLD, Stats
from streamgrpo.topics import catalog

LIVE_FIELDS = ("groups", "reward_count", "reward_mean", "success_rate", "eval_accuracy", "eval_ci_low",
               "eval_ci_high", "eval_task_set", "metrics")


@dataclass
class View:
    """An adapter name's lifecycle, the newest published state per version and (fallback) computed figures."""

    adapter: str
    line: Line
    states: dict[int, R.AdapterState]
    stats: Stats

    def state(self, version: int, now: datetime) -> R.AdapterState:
        """Lifecycle from the fold, live figures from ``adapter-registry`` when it has the version."""
        mine = adapter_state(self.line, self.adapter, version, self.stats, now)
        published = self.states.get(version)
        if published is None:
            return mine
        return replace(mine, **{f: getattr(published, f) for f in LIVE_FIELDS})

    @property
    def versions(self) -> list[int]:
        return sorted({0, *self.line.announced})


#: A topic's events in log order: from the broker (:func:`kafka_events`) or a run's archive (:func:`archive_events`).
EventSource = Callable[[str], Iterable[R.Event]]


def kafka_events(kafka: KafkaSettings) -> EventSource:
    from streamgrpo.topics.follow import read_topic

    return lambda topic: (rec.event for rec in read_topic(kafka, topic) if rec.event is not None)


def archive_events(root: Path) -> EventSource:
    """Events of a run's Parquet archive (``<run dir>/archive``), per topic in (partition, offset) order."""
    from streamgrpo.archive.store import read_events

    return lambda topic: (event for event, _ in read_events(root, topic))


def load_view(kafka: KafkaSettings, adapter: str, canary_share: float,
              success_threshold: float = SUCCESS_THRESHOLD) -> View:
    return view_from(kafka_events(kafka), adapter, canary_share, success_threshold)


def view_from(events: EventSource, adapter: str, canary_share: float,
              success_threshold: float = SUCCESS_THRESHOLD) -> View:
    """The lifecycle of ``adapter``; without a controller's ``AdapterState`` records its figures are folded from
    the topics, successes counted at ``success_threshold`` (the loop's ``[streams] success_threshold``)."""
    registry = AdapterRegistry(canary_share)
    for event in events(catalog.ADAPTER_EVENTS):
        registry.apply(event)
    states: dict[int, R.AdapterState] = {}
    for event in events(catalog.ADAPTER_REGISTRY):  # log order: the last state of a version is its newest
        if isinstance(event, R.AdapterState) and event.adapter_name == adapter:
            states[event.version] = event
    stats = Stats(success_threshold)
    if not states:  # no controller published yet: compute the figures from the topics
        for topic in (catalog.REWARDS, catalog.EVALUATIONS):
            for event in events(topic):
                stats.apply(event)
    return View(adapter, registry.line(adapter), states, stats)


def age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "-"
    s = max(0.0, (now - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s"


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def row(state: R.AdapterState, now: datetime) -> dict[str, str]:
    heldout = "-" if state.eval_accuracy is None else (
        f"{state.eval_accuracy:.3f} [{_num(state.eval_ci_low, '{:.2f}')},{_num(state.eval_ci_high, '{:.2f}')}]")
    return {"VERSION": f"v{state.version}", "STATUS": state.status.value,
            "PARENT": "-" if state.version == 0 else f"v{state.parent_version or 0}",
            "REWARD": f"{_num(state.reward_mean)} (n={state.reward_count})", "SUCCESS": _num(state.success_rate),
            "HELD-OUT": heldout, "SAMPLES": str(state.samples_trained), "AGE": age(state.published_at, now)}

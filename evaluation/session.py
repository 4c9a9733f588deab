"""One evaluation session: settings, tasks, the policy (loaded once) and the versions to evaluate.

Shared by ``streamgrpo eval`` and the evaluator service of ``streamgrpo run`` so both evaluate the
agent exactly as the rollout workers serve it (same ``[rollout]``, ``[loop]``, ``[streams]``
sampling budget and ``[judge]`` routing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from streamgrpo import config
from streamgrpo.config import KafkaSettings, LoopSettings
from streamgrpo.errors import StreamGRPOError
from streamgrpo.evaluation.adapters import Target, TargetError, resolve
from streamgrpo.evaluation.judging import CorrectnessJudge
from streamgrpo.evaluation.runner import EvalRun, EvalSpec, evaluate
from streamgrpo.tasks.datasets import DatasetError, RowError, TaskRow
from streamgrpo.topics import catalog
from streamgrpo.topics.clients import topic_name

log = logging.getLogger(__name__)


@dataclass
class LabelledRun:
    """An :class:`EvalRun` with the label it is shown under."""

    label: str
    run: EvalRun

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run, name)


class EvalSession:
    def __init__(self, rollout: Any, loop: LoopSettings, streams: Any, judge: Any, kafka: KafkaSettings,
                 store: Path | None = None) -> None:
        self.rollout, self.loop, self.streams = rollout, loop, streams
        self.judge = CorrectnessJudge(judge)
        self.kafka = kafka
        self.store = store or loop.adapter_store
        self.archive: Path | None = None  # a finished run's event archive: announcements come from it, not Kafka
        self._ctx: Any = None

    @classmethod
    def from_config(cls, path: str | None, *, bootstrap: str | None = None, store: Path | None = None,
                    rollout_overrides: dict[str, Any] | None = None) -> EvalSession:
        from streamgrpo.judge.config import JudgeSettings
        from streamgrpo.rollout.config import RolloutConfig
        from streamgrpo.streams.config import StreamsSettings

        return cls(config.load(RolloutConfig, "rollout", path=path, overrides=rollout_overrides),
                   config.load(LoopSettings, "loop", path=path), config.load(StreamsSettings, "streams", path=path),
                   config.load(JudgeSettings, "judge", path=path),
                   config.load(KafkaSettings, "kafka", path=path, overrides={"bootstrap": bootstrap}), store)

    # -- inputs -----------------------------------------------------------------------------------
    def load_tasks(self, source: str, *, kind: str = "auto", limit: int | None = None) -> list[TaskRow]:
        """Every row of ``source`` (a bad row fails the whole set with its row number, as in `submit`)."""
        from streamgrpo.tasks.reader import read_rows

        try:
            numbered = list(read_rows(source, kind=kind))
        except DatasetError as exc:
            raise click.ClickException(str(exc)) from exc
        bad = [(n, str(r)) for n, r in numbered if isinstance(r, RowError)]
        bad += [(n, "no ground truth: an evaluation needs one") for n, r in numbered
                if isinstance(r, TaskRow) and not r.ground_truths]
        if bad:
            shown = "\n".join(f"  row {n}: {reason}" for n, reason in sorted(bad)[:20])
            more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
            raise click.ClickException(f"{len(bad)} invalid row(s) in {source}; nothing was evaluated:\n{shown}{more}")
        rows = [r for _, r in numbered if isinstance(r, TaskRow)]
        if not rows:
            raise click.ClickException(f"{source} holds no task")
        return rows[:limit] if limit else rows

    def events(self) -> list[Any] | None:
        """Events of ``adapter-events``, or None when no broker is reachable (or the session reads an archive)."""
        if self.archive is not None:
            return None
        try:
            from streamgrpo.topics.follow import read_topic

            return [r.event for r in read_topic(self.kafka, catalog.ADAPTER_EVENTS, timeout_s=10)]
        except StreamGRPOError as exc:
            log.info("no broker reachable (%s): adapters come from the store", exc)
            return None

    def targets(self, specs: Sequence[str], dirs: Sequence[Path], *, all_versions: bool,
                include_base: bool) -> list[Target]:
        needs_events = bool(specs) or all_versions
        events = self.events() if needs_events else None
        try:
            found = resolve(specs, dirs, all_versions=all_versions, include_base=include_base,
                            adapter_name=self.loop.adapter_name, events=events, store_root=self.store,
                            archive=self.archive)
        except TargetError as exc:
            raise click.ClickException(str(exc)) from exc
        for t in found:
            if t.path is not None and not t.verified:
                click.echo(f"note: {t.label} ({t.path}) was not checked against an AdapterPublished event "
                           f"(sha256 {t.sha256})", err=True)
        return found

    # -- running ----------------------------------------------------------------------------------
    def context(self) -> Any:
        """The agent (policy loaded once, then adapters are added to it)."""
        if self._ctx is None:
            from streamgrpo.rollout.runtime import build_context, build_policy

            self._ctx = build_context(self.rollout, build_policy(self.rollout))
        return self._ctx

    def spec(self, task_source: str, *, samples: int = 1, temperature: float | None = None, batch_size: int = 16,
             seed: int = 0) -> EvalSpec:
        temp = temperature if temperature is not None else (0.0 if samples == 1 else 1.0)
        return EvalSpec(task_set=task_source, samples=samples, temperature=temp, top_p=self.streams.top_p,
                        max_new_tokens=self.streams.max_new_tokens, max_turns=self.loop.max_turns,
                        batch_size=batch_size, seed=seed)

    def run(self, targets: Sequence[Target], rows: Sequence[TaskRow], *, task_source: str, samples: int = 1,
            temperature: float | None = None, batch_size: int = 16, seed: int = 0,
            progress: Callable[[str], Callable[[int, int, float], None]] | None = None) -> list[LabelledRun]:
        spec = self.spec(task_source, samples=samples, temperature=temperature, batch_size=batch_size, seed=seed)
        return [self.run_one(t, rows, spec, progress) for t in targets]

    def run_one(self, target: Target, rows: Sequence[TaskRow], spec: EvalSpec,
                progress: Callable[[str], Callable[[int, int, float], None]] | None = None) -> LabelledRun:
        ctx = self.context()
        if target.path is not None and target.version not in ctx.policy.resident_versions(target.adapter_name):
            ctx.policy.load_adapter(target.adapter_name, target.version, target.path)
        with ctx.policy.pinned(target.adapter_name, target.version):
            run = evaluate(ctx, rows, replace(spec), self.judge, adapter_name=target.adapter_name,
                           version=target.version, progress=progress(target.label) if progress else None)
        return LabelledRun(target.label, run)

    # -- output -----------------------------------------------------------------------------------
    def publish(self, runs: Sequence[LabelledRun], *, required: bool, trigger: str = "cli") -> str:
        """Send one EvaluationCompleted per run; a note saying what happened."""
        from streamgrpo.topics.producer import EventProducer

        try:
            with EventProducer(self.kafka, "eval") as producer:
                for r in runs:
                    producer.send(r.run.event(self.judge.info, trigger=trigger))
                producer.flush()
        except StreamGRPOError as exc:
            if required:
                raise click.ClickException(f"could not publish the evaluations: {exc}") from exc
            return f"not published (no broker reachable: {exc}); pass --bootstrap or start one with `streamgrpo broker up`"
        return (f"published {len(runs)} EvaluationCompleted event(s) on "
                f"{topic_name(self.kafka, catalog.EVALUATIONS)}")

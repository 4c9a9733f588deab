"""``replay train``: a fresh adapter lineage trained on a chosen range of history, beside the live run.

```
history (broker topics or archive) --select_samples(range, source adapter)--> samples in canonical order
    [--judge J: rejudge their groups -> Rewards + TrainingSamples produced into the namespace; train on those]
    --RangeSource--> trainer.loop.train (the live trainer's own loop: admit -> step -> store -> announce)
    -> <adapter_store>/<new adapter>/v1..vN, AdapterPublished on <prefix><namespace>adapter-events
```

Isolation from the live run: the replay trains a NEW adapter family (default ``<source>-<run_name>``,
refused if it already has stored versions), reads history without a consumer group (nothing of the live
trainer's group ``trainer.<adapter>.<run>`` is joined or committed; its own progress is its adapter
manifests), and announces into a namespace: the topic prefix ``<prefix><namespace>`` (default
``replay.<run_name>.``), where it also writes re-judged events. Staleness is not enforced (the samples'
sampling versions belong to the source lineage); everything else is the live trainer's admission.

Determinism: the same range, seed and settings give the same adapter bytes on CPU: samples are read in
a canonical order (:func:`~streamgrpo.replay.sources.canonical`), the LoRA initialisation is seeded
(``trainer.seed``) and the number of CPU threads is pinned (``threads``, default 1). Measured (fp32 compute):
SmolLM2-135M steps are bitwise identical run to run at 1 thread and at 2 threads, but differ between 1 and 2 threads
(intra-op reductions split differently); torch's deterministic-algorithms switch, also set, changed nothing
on CPU. Same machine type and library versions assumed (other CPU kernels may round differently).
What is not covered: bitwise equality on GPU (CUDA kernels are not bitwise reproducible across runs
without further settings), resuming a replay (run it again under a new run name).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.archive.schema import Place
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.replay.errors import ReplayError
from streamgrpo.replay.ranges import SampleRange
from streamgrpo.replay.sources import History, as_received, select_samples
from streamgrpo.topics import catalog
from streamgrpo.topics.clients import topic_name
from streamgrpo.topics.received import Received

log = logging.getLogger(__name__)
SERVICE = "replay"


class RangeSource:
    """A bounded, ordered sample source for :func:`streamgrpo.trainer.loop.train` (no group; nothing committed)."""

    def __init__(self, records: list[Received]) -> None:
        self.records = records
        self.position = 0
        self.committed = 0  # records consumed up to the last published adapter
        self.rejected: list[tuple[Received, str]] = []

    async def poll(self, max_records: int = 100, timeout_ms: int = 500) -> list[Received]:
        batch = self.records[self.position:self.position + max_records]
        self.position += len(batch)
        return batch

    async def commit(self, held: Mapping[tuple[str, int], int] | None = None) -> None:
        """Nothing is committed to Kafka (the replay's progress is its stored adapters); counts the records the
        published adapters reach (the loop commits right after each publish): those polled, less what the
        trainer's intake still ``held`` ((topic, partition) -> first held offset)."""
        stops = held or {}
        self.committed = sum(1 for r in self.records[:self.position]
                             if r.offset < stops.get((r.topic, r.partition), r.offset + 1))

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None:
        self.rejected.append((received, reason_code))  # the live consumer dead-lettered it already

    def assignment(self) -> Collection[object]:
        return {SERVICE}


@dataclass(frozen=True)
class ReplayPlan:
    """What to replay and where its results go."""

    run_name: str
    source_adapter: str
    history: History
    range: SampleRange
    adapter_name: str | None = None  # default <source_adapter>-<run_name>
    namespace: str | None = None  # default replay.<run_name>.
    judge: str | None = None
    threads: int = 1

    @property
    def target(self) -> str:
        return self.adapter_name or f"{self.source_adapter}-{self.run_name}"

    @property
    def topic_namespace(self) -> str:
        return self.namespace if self.namespace is not None else f"replay.{self.run_name}."


@dataclass
class ReplayResult:
    adapter_name: str
    namespace_prefix: str
    selected: int
    trained_on: int
    published: list[R.AdapterPublished] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    rejudged_rewards: int = 0
    rejudged_samples: int = 0
    left_over: int = 0  # records after the last published adapter (a last, partial step is not trained)


def deterministic_torch(threads: int) -> None:
    """Pin what makes CPU training bitwise repeatable: thread count and deterministic algorithms."""
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


def trainer_config(base: Any, plan: ReplayPlan) -> Any:
    """The live trainer settings, retargeted at the replay's lineage (fresh adapter, no staleness bound)."""
    return base.model_copy(update={
        "adapter_name": plan.target, "run_name": plan.run_name, "sample_adapter_name": plan.source_adapter,
        "max_staleness": 100_000, "idle_exit_s": 0.001, "poll_timeout_ms": 1})


def replay_train(plan: ReplayPlan, base_cfg: Any, kafka: KafkaSettings, judge_settings: Any = None,
                 echo: Any = log.info) -> ReplayResult:
    """Select, (re-judge,) and train; returns what was published. See the module docstring."""
    from streamgrpo.models import adapter_store as store
    from streamgrpo.topics.admin import ensure
    from streamgrpo.topics.catalog import spec

    cfg = trainer_config(base_cfg, plan)
    if store.versions(cfg.adapter_store, cfg.adapter_name):
        raise ReplayError(f"adapter {cfg.adapter_name} already has versions in {cfg.adapter_store}: a replay trains a "
                          "fresh lineage; choose another --run-name or --adapter-name")
    ns = kafka.model_copy(update={"topic_prefix": kafka.topic_prefix + plan.topic_namespace})
    ensure(ns, [spec(catalog.ADAPTER_EVENTS), spec(catalog.REWARDS), spec(catalog.TRAINING_SAMPLES)])
    chosen = select_samples(plan.history, plan.range, plan.source_adapter)
    echo(f"{len(chosen)} TrainingSamples of {plan.source_adapter} in range ({plan.range.describe()}) "
         f"from {plan.history.label}")
    if not chosen:
        raise ReplayError("the range holds no TrainingSample of adapter "
                          f"{plan.source_adapter!r}; check --from/--to and --source-adapter")
    result = ReplayResult(cfg.adapter_name, ns.topic_prefix, len(chosen), len(chosen))
    if plan.judge is not None:
        chosen = _rejudge(plan, chosen, ns, judge_settings, result, echo)
    records = [as_received(s, p) for s, p in chosen]
    result.published = asyncio.run(_train(cfg, ns, records, plan.threads, result))
    return result


async def _train(cfg: Any, ns: KafkaSettings, records: list[Received], threads: int,
                 result: ReplayResult) -> list[R.AdapterPublished]:
    import torch

    from streamgrpo.topics.producer import EventProducer
    from streamgrpo.trainer.loop import resume, train

    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    deterministic_torch(threads)
    try:
        state = await asyncio.to_thread(resume, cfg)
        source = RangeSource(records)
        with EventProducer(ns, SERVICE) as producer:
            published = await train(source, producer, state, cfg)
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])
    result.left_over = len(records) - source.committed
    result.dropped = {k: int(v) for k, v in state.dropped.items()}
    for _, code in source.rejected:
        result.dropped[code] = result.dropped.get(code, 0) + 1
    return published


def _rejudge(plan: ReplayPlan, chosen: list[tuple[R.TrainingSample, Place]], ns: KafkaSettings,
             judge_settings: Any, result: ReplayResult, echo: Any) -> list[tuple[R.TrainingSample, Place]]:
    """Re-judge the groups of ``chosen``, publish the new events into the namespace, return the new samples
    (in the order of their groups' first selected sample) with the places they got there."""
    from streamgrpo.judge.scorers import build_scorer
    from streamgrpo.replay.rejudge import load_groups, rejudge_group
    from streamgrpo.replay.restore import ids_on_broker
    from streamgrpo.replay.sources import BrokerHistory
    from streamgrpo.topics.producer import EventProducer

    assert plan.judge is not None
    scorer = build_scorer(plan.judge, judge_settings)
    groups = load_groups(plan.history, [s for s, _ in chosen])
    outcomes = [rejudge_group(g, scorer) for g in groups]
    rewards = [r for o in outcomes for r in o.rewards]
    samples = [s for o in outcomes for s in o.samples]
    present = ids_on_broker(ns, catalog.REWARDS) | ids_on_broker(ns, catalog.TRAINING_SAMPLES)
    with EventProducer(ns, SERVICE) as producer:
        for event in [*rewards, *samples]:
            if event.event_id not in present:
                producer.send(event)
    result.rejudged_rewards, result.rejudged_samples = len(rewards), len(samples)
    echo(f"judge {plan.judge}: {len(groups)} groups re-scored -> {len(rewards)} Rewards, {len(samples)} "
         f"TrainingSamples in {ns.topic_prefix}*")
    places = {e.event_id: p for e, p in BrokerHistory(ns).events(catalog.TRAINING_SAMPLES)}
    missing = [s.event_id for s in samples if s.event_id not in places]
    if missing:
        raise ReplayError(f"{len(missing)} re-judged samples are not on {topic_name(ns, catalog.TRAINING_SAMPLES)} "
                          "after publishing; is the broker healthy?")
    result.trained_on = len(samples)
    return [(s, places[s.event_id]) for s in samples]


def archive_namespace(archive: Path, ns: KafkaSettings, namespace: str) -> int:
    """Archive the namespace's rewards and samples under ``<archive>/_ns/<namespace>`` (for judge-disagreement)."""
    from streamgrpo.archive.store import ArchiveWriter
    from streamgrpo.replay.sources import BrokerHistory

    writer = ArchiveWriter(archive, namespace=namespace)
    history = BrokerHistory(ns)
    for topic in (catalog.REWARDS, catalog.TRAINING_SAMPLES, catalog.ADAPTER_EVENTS):
        writer.add_all(history.events(topic))
    writer.flush()
    return writer.written

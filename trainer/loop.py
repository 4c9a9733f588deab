"""The trainer process: consume -> batch -> step -> store -> announce -> commit.

```
[training-samples] --collect()--> admitted samples (one step's worth, oldest first; stale/dup dropped)
        --train_step()--> metrics (step.optimizer_step on micro-batches, in a worker thread)
        every publish_every steps:
        --publish()--> adapter_store.write_version (atomic) -> AdapterPublished (flushed)
        --consumer.commit()--> offsets of exactly what that adapter trained on (not what the intake holds)
```

Rollbacks (:mod:`streamgrpo.trainer.rollback`): the trainer follows ``adapter-events`` through the one
registry fold; when the version its weights are was rolled back, it continues from the primary's
stored weights and optimizer state, and its next publication (a new version number) names the
primary as parent. Samples of rolled-back versions are dropped; staleness counts along the lineage.

Guarantees: offsets are committed only after the adapter that used them is stored and announced.
A restarted trainer (even after SIGKILL) resumes from the newest stored adapter + optimizer state;
records that adapter already covered (crash between store and commit) are skipped by the
manifest's ``committed`` map, and a stored but unannounced version is announced again, so no
sample is skipped or trained twice. Order: samples are taken oldest behaviour version first from
everything polled (:mod:`streamgrpo.trainer.intake`), so a group that closed early on one partition does
not go stale behind later groups on the others, and before a step that publishes, a held sample the next
version would make too stale is taken with everything ahead of it (the step grows). Commits stop at what
the intake still holds.
Start: the trainer reads the ``adapter-events`` history before anything else; a broker that does not answer
is waited for (bounded logs, liveness beating) and SIGTERM stops the wait (:func:`history_read`).
Backpressure: the intake holds at most the admission budget plus one step, and nothing is polled while
a step runs.
Not covered: several trainers in one consumer group (one trainer process per training run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Protocol

from streamgrpo import metrics as M
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.heartbeat import Heartbeat
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.published import typed_fields
from streamgrpo.lifecycle.registry import AdapterRegistry, ancestors
from streamgrpo.models import adapter_store as store
from streamgrpo.models.base import resolve_base_model
from streamgrpo.models.grammar import GrammarReplay
from streamgrpo.topics import catalog
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.follow import iter_topic, read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.received import Received
from streamgrpo.trainer import rollback
from streamgrpo.trainer.batching import build_batch, drop_reason, micro_batches
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.errors import TrainerError
from streamgrpo.trainer.intake import capacity
from streamgrpo.trainer.lineage import Lineage, already_trained, parse_tp_key
from streamgrpo.trainer.losses import build_loss
from streamgrpo.trainer.rollback import check_rollback, drop_reason_for
from streamgrpo.trainer.state import TrainerState, resume
from streamgrpo.trainer.step import StepConfig, optimizer_step

log = logging.getLogger(__name__)
SERVICE = "trainer"
SAMPLES_TOPIC = catalog.TRAINING_SAMPLES
#: After a restart the trainer re-reads up to this many samples per partition below the stored adapter's committed
#: offsets and remembers their ids (:func:`remember_trained`).
DEDUP_LOOKBACK = 5000
#: How long a poll waits for more records once the intake holds a step's worth (ms): long enough for a group
#: that closed at about the same time as the one just received (each step waits this long once more).
DRAIN_MS = 100


def grammar_replay(state: TrainerState, cfg: TrainerConfig) -> GrammarReplay:
    """The replay of grammar-constrained samples: the base model's tokenizer over the model's vocabulary."""
    if state.replay is None:
        from transformers import AutoTokenizer

        path = resolve_base_model(cfg.base_model, cfg.model_cache)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            raise TrainerError(f"samples were sampled under a grammar, and replaying it needs the tokenizer of "
                               f"{cfg.base_model!r}, which {path} does not hold: {exc}") from exc
        vocab = int(state.model.get_output_embeddings().weight.shape[0])
        state.replay = GrammarReplay(tokenizer, vocab)
    return state.replay


def replay_error(sample: R.TrainingSample, replay: GrammarReplay) -> str | None:
    """Why the turns of a grammar-constrained ``sample`` do not replay under its grammar (None: they do)."""
    constraint = sample.sampling.constraint if sample.sampling is not None else None
    if constraint is None:
        return None
    try:
        for turn in sample.turns:
            replay(constraint, turn.action_token_ids, turn.turn)
    except ValueError as exc:
        return str(exc)
    return None


def remember_trained(state: TrainerState, kafka: KafkaSettings, lookback: int = DEDUP_LOOKBACK) -> int:
    """Remember the ids of the samples just below the stored adapter's committed offsets; returns how many.

    The advantage window sends a sample at least once: killed between sending it and recording that it did, it
    sends the same sample (same event id) again after its restart. A copy that lands after the offsets the
    stored adapter covers is not "already trained" by offset, and a restarted trainer's in-memory id set is
    empty, so without this the copy would be trained a second time. Only ``lookback`` records per partition
    are read: a resend follows its original within one window restart, not thousands of samples later."""
    ranges: dict[int, tuple[int, int]] = {}
    for key, stop in state.committed.items():
        topic, partition = parse_tp_key(key)
        if topic == SAMPLES_TOPIC and stop > 0:
            ranges[partition] = (max(0, stop - lookback), stop)
    if not ranges:
        return 0
    before = len(state.seen)
    for rec in iter_topic(kafka, SAMPLES_TOPIC, partitions=ranges):
        if isinstance(rec.event, R.TrainingSample):
            state.seen.add(rec.event.event_id)
    return len(state.seen) - before


def adapter_event(manifest: store.Manifest, uri: str, sha256: str) -> R.AdapterPublished:
    """The announcement of a stored version; its id is deterministic (re-announcing is idempotent)."""
    return R.AdapterPublished(
        envelope=R.Envelope.new(SERVICE, event_id=ids.adapter_published_id(manifest.adapter_name, manifest.version)),
        adapter_name=manifest.adapter_name, version=manifest.version, uri=uri, sha256=sha256,
        base_model=manifest.base_model, trainer_step=manifest.trainer_step,
        lineage=list(manifest.lineage),
        parent_version=manifest.parent_version, metrics=dict(manifest.metrics),
        drops=None if manifest.drops is None else dict(manifest.drops), samples_dequeued=manifest.samples_dequeued,
        max_staleness=manifest.max_staleness, auto_promote=manifest.auto_promote,
    )


def announce_if_missing(producer: EventProducer, kafka: KafkaSettings, cfg: TrainerConfig) -> None:
    """Announce the newest stored version if adapter-events does not have it (crash before announce)."""
    found = store.latest(cfg.adapter_store, cfg.adapter_name)
    if found is None:
        return
    path, manifest = found
    for r in read_topic(kafka, catalog.ADAPTER_EVENTS):
        ev = r.event
        if isinstance(ev, R.AdapterPublished) and (ev.adapter_name, ev.version) == (cfg.adapter_name, manifest.version):
            return
    log.warning("v%d was stored but never announced; announcing it now", manifest.version)
    producer.send(adapter_event(manifest, path.as_uri(), store.sha256_dir(path)))
    producer.flush()


class SampleSource(Protocol):
    """What the loop reads samples from: the live group consumer (:class:`EventConsumer`), or a replay's
    bounded, ordered range (:class:`streamgrpo.replay.train.RangeSource`)."""

    async def poll(self, max_records: int = ..., timeout_ms: int = ...) -> list[Received]: ...

    async def commit(self, held: Mapping[tuple[str, int], int] | None = None) -> None: ...

    async def dead_letter(self, received: Received, reason_code: str, reason: str) -> None: ...

    def assignment(self) -> Collection[object]: ...


#: Drop reasons that mean the record itself is bad: it goes to dead-letters (the others are normal drops).
DEAD_LETTER_REASONS = frozenset({"malformed", "empty", "too_long", "not_a_sample", "sampling_mismatch"})


def accept(received: Received, state: TrainerState, cfg: TrainerConfig) -> tuple[R.TrainingSample | None, str | None]:
    """Bookkeeping for one consumed record -> (the sample to train, or None; the drop reason, or None)."""
    if already_trained(state.committed, received.topic, received.partition, received.offset):
        return None, "already_trained"
    state.lineage.add(received.topic, received.partition, received.offset)
    sample = received.event
    if not isinstance(sample, R.TrainingSample):
        return None, "not_a_sample"
    if state.seen.seen(sample.event_id):
        return None, "duplicate"
    family = cfg.sample_adapter_name or cfg.adapter_name
    line = state.registry.line(cfg.adapter_name) if state.registry is not None else None
    ours = sample.adapter_name == cfg.adapter_name
    lineage_reason = drop_reason_for(sample, line, state.version, max_staleness=cfg.max_staleness) if ours else None
    current = None if line is not None and ours else state.version  # None: staleness was checked along the lineage
    reason = lineage_reason or drop_reason(sample, adapter_name=family, current_version=current,
                                           max_staleness=cfg.max_staleness, max_seq_len=cfg.max_seq_len)
    if reason is None and sample.sampling is not None and sample.sampling.constraint is not None:
        error = replay_error(sample, grammar_replay(state, cfg))
        if error is not None:
            log.warning("sample %s does not replay under its grammar: %s", sample.envelope.event_id, error)
            reason = "sampling_mismatch"
    return (sample, None) if reason is None else (None, reason)


async def collect(consumer: SampleSource, state: TrainerState, cfg: TrainerConfig,
                  heartbeat: Heartbeat | None = None, stop: asyncio.Event | None = None
                  ) -> list[R.TrainingSample] | None:
    """Read until one optimizer step's worth of samples is admitted; ``None`` after ``idle_exit_s`` idle
    (time waiting for a partition assignment, e.g. while a killed predecessor's session expires, is not idle),
    or once ``stop`` is set (checked before every poll, so a stop waits at most one ``poll_timeout_ms``; what was
    taken or is held is not trained, published or committed: a restart reads it again).

    Everything already fetched (up to :func:`~streamgrpo.trainer.intake.capacity`) is polled into
    ``state.intake`` before samples are taken from it, oldest behaviour version first (see
    :mod:`streamgrpo.trainer.intake`); what a step does not take stays there for the next one. Before a step
    that publishes, a held sample the next version would make too stale is taken too, with every record ahead
    of it on its partition: such a step has more than ``samples_per_step`` samples."""
    alive = heartbeat or Heartbeat(None)
    samples: list[R.TrainingSample] = []
    intake, cap = state.intake, capacity(cfg.samples_per_step, cfg.max_staleness)
    idle_since = time.monotonic()
    while len(samples) < cfg.samples_per_step:
        if stop is not None and stop.is_set():
            return None
        need = cfg.samples_per_step - len(samples)
        if len(intake) < cap:
            # wait for records while fewer than the step needs are held; otherwise only drain what is fetched
            batch = await consumer.poll(max_records=cap - len(intake),
                                        timeout_ms=cfg.poll_timeout_ms if len(intake) < need else DRAIN_MS)
            alive.beat()
            intake.extend(batch)
            if batch:
                log.debug("polled %d records; the intake holds %d (a step takes %d more)", len(batch), len(intake), need)
            if batch or not consumer.assignment():  # idle = assigned partitions with nothing new
                idle_since = time.monotonic()
            elif (len(intake) < need and cfg.idle_exit_s is not None  # ... and not a step's worth held
                  and time.monotonic() - idle_since > cfg.idle_exit_s):
                return None
            if batch and len(intake) < cap:
                continue  # more may be fetched already: choose among all of it
        while len(samples) < cfg.samples_per_step and (received := intake.take()) is not None:
            await take(received, samples, consumer, state, cfg)
    publishes = (state.step + 1) % cfg.publish_every == 0
    if publishes:  # a held sample the next version would make too stale is trained now (the step grows)
        for received in intake.take_through_older(pacing.first_fresh_version(state.version + 1, cfg.max_staleness)):
            await take(received, samples, consumer, state, cfg)
    return samples


async def take(received: Received, samples: list[R.TrainingSample], consumer: SampleSource, state: TrainerState,
               cfg: TrainerConfig) -> None:
    """Accept ``received`` into ``samples``, or count (and, when the record is bad, dead-letter) its drop."""
    sample, reason = accept(received, state, cfg)
    if sample is not None:
        samples.append(sample)
        return
    state.dropped[str(reason)] += 1
    M.current().inc(M.TRAINER_DROPS, reason=str(reason))
    if reason in DEAD_LETTER_REASONS:
        await consumer.dead_letter(received, f"trainer_{reason}", f"TrainingSample cannot be trained: {reason}")


def train_step(state: TrainerState, samples: list[R.TrainingSample], cfg: TrainerConfig) -> dict[str, float]:
    """One optimizer step on ``samples`` (blocking; run it in a thread)."""
    constrained = any(s.sampling is not None and s.sampling.constraint is not None for s in samples)
    batch = build_batch(samples, max_seq_len=cfg.max_seq_len, normalisation=cfg.normalisation,
                        max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                        replay=grammar_replay(state, cfg) if constrained else None)
    objective = cfg.objective_at(state.step)
    demos = sum(s.demo_source is not None for s in samples)
    step_cfg = StepConfig(loss=build_loss(objective), loss_config=cfg.loss_config(), max_grad_norm=cfg.max_grad_norm,
                          share_prefix=cfg.share_prefix, lr_scale=cfg.lr_scale(demos, len(samples)))
    metrics = optimizer_step(state.model, state.optimizer, state.scheduler,
                             micro_batches(batch, cfg.micro_batch_tokens, cfg.share_prefix), step_cfg)
    metrics["raft_phase"] = float(objective == "raft" and cfg.loss != "raft")
    metrics["warm_start"] = float(cfg.warm_start_step(demos, len(samples)))
    state.step += 1
    return metrics


def publish(producer: EventProducer, state: TrainerState, cfg: TrainerConfig) -> R.AdapterPublished:
    """Store the adapter as the next version and announce it (flushed) -> the event."""
    # the facts (drops, dequeued count, max_staleness, promotion) are typed fields; the pre-v4 metric keys stay for
    # one release so that a v3 reader during an upgrade still reads them (lifecycle.published.LEGACY_KEYS)
    metrics = {**state.last_metrics, **pacing.drop_metrics(state.dropped, cfg.max_staleness)}
    lineage = state.lineage.offset_ranges()
    manifest = store.Manifest(
        adapter_name=cfg.adapter_name, version=max(state.version, state.published) + 1,
        parent_version=state.version or None,
        base_model=cfg.base_model, trainer_step=state.step, lineage=lineage, metrics=metrics,
        committed=state.lineage.next_offsets(state.committed),
        **typed_fields(state.dropped, lineage, cfg.max_staleness, cfg.canary_share),
    )
    trainer_state = {"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict()}
    path, sha = store.write_version(cfg.adapter_store, manifest, state.model, trainer_state)
    event = adapter_event(manifest, path.as_uri(), sha)
    producer.send(event)
    producer.flush()
    state.version, state.committed, state.lineage = manifest.version, manifest.committed, Lineage()
    state.published = manifest.version
    state.dropped = Counter()
    log.info("published %s v%d (step %d) sha256=%s… lineage=%s", cfg.adapter_name, manifest.version, state.step,
             sha[:12], [(r.partition, r.start, r.end) for r in event.lineage])
    return event


def record_step(state: TrainerState, samples: list[R.TrainingSample], metrics: dict[str, float],
                seconds: float, adapter_name: str | None = None) -> None:
    """The step's series in the process's metrics (a no-op when they are off); a sample's staleness is
    :func:`~streamgrpo.lifecycle.pacing.versions_behind` along the lineage of ``adapter_name`` where the registry
    knows it."""
    m, now = M.current(), time.time()
    chain = (ancestors(state.registry.line(adapter_name), state.version)
             if state.registry is not None and adapter_name is not None else None)
    m.inc(M.TRAINER_STEPS)
    m.observe(M.TRAINER_STEP_DURATION, seconds)
    m.inc(M.TRAINER_TOKENS, metrics.get("tokens", 0.0))
    m.inc(M.TRAINER_SAMPLES, len(samples))
    for spec, key in ((M.TRAINER_LOSS, "loss"), (M.TRAINER_KL, "kl"), (M.TRAINER_CLIP, "clip_frac")):
        if key in metrics:
            m.set(spec, metrics[key])
    for sample in samples:
        own = chain if sample.adapter_name == adapter_name else None  # another family: by version numbers
        m.observe(M.SAMPLE_STALENESS, max(0, pacing.versions_behind(state.version, sample.behaviour_version, own)))
        m.observe(M.SAMPLE_AGE, max(0.0, now - sample.envelope.event_time.timestamp()))


def log_step(state: TrainerState, metrics: dict[str, float], seconds: float) -> None:
    drops = ", ".join(f"{k}={v}" for k, v in sorted(state.dropped.items())) or "none"
    gaps = " ".join(f"v{k.removeprefix('abs_log_ratio_v')}={v:.3f}/{metrics['max_' + k]:.3f}"
                    for k, v in sorted(metrics.items()) if k.startswith("abs_log_ratio_v"))
    log.info("step %d loss=%.4f kl=%.4f clip=%.3f is_w=%.3f tis_trunc=%.3f adv=%.3f tokens=%d tok/s=%.0f "
             "|logp-behaviour| mean/max %s dropped: %s", state.step, metrics["loss"], metrics["kl"],
             metrics["clip_frac"], metrics["is_weight_mean"], metrics["tis_truncated_frac"], metrics["mean_adv"],
             metrics["tokens"], metrics["tokens"] / max(seconds, 1e-9), gaps, drops)


async def train(consumer: SampleSource, producer: EventProducer, state: TrainerState, cfg: TrainerConfig,
                stop: asyncio.Event | None = None, heartbeat: Heartbeat | None = None) -> list[R.AdapterPublished]:
    """The loop of the module docstring until ``max_steps``, ``idle_exit_s`` or ``stop``."""
    alive = heartbeat or Heartbeat(None)
    published: list[R.AdapterPublished] = []
    while not (stop is not None and stop.is_set()) and (cfg.max_steps is None or state.step < cfg.max_steps):
        await asyncio.to_thread(check_rollback, state, cfg)
        samples = await collect(consumer, state, cfg, alive, stop)
        if samples is None:
            if stop is not None and stop.is_set():
                taken = sum(r.end - r.start + 1 for r in state.lineage.offset_ranges())
                log.info("stopping on request: %d records taken and %d held since the last adapter stay "
                         "uncommitted (read again after a restart)", taken, len(state.intake))
            else:
                log.info("no samples for %.0f s; stopping (dropped since the last adapter: %s)", cfg.idle_exit_s,
                         dict(state.dropped))
            break
        started = time.monotonic()
        state.last_metrics = await asyncio.to_thread(train_step, state, samples, cfg)
        log_step(state, state.last_metrics, time.monotonic() - started)
        record_step(state, samples, state.last_metrics, time.monotonic() - started, cfg.adapter_name)
        alive.beat()
        if await asyncio.to_thread(check_rollback, state, cfg):
            continue  # the step was computed on weights rolled back meanwhile: not published
        if state.step % cfg.publish_every == 0:
            with M.current().timer(M.ADAPTER_PUBLISH_DURATION):
                published.append(await asyncio.to_thread(publish, producer, state, cfg))
            M.current().set(M.ADAPTER_VERSION, state.version, role="trained")
            await consumer.commit(state.intake.held())  # not past what the intake still holds
    return published


async def history_read(caught_up: asyncio.Event, follower: asyncio.Task[None], stop: asyncio.Event | None,
                       heartbeat: Heartbeat) -> bool:
    """Wait until the ``adapter-events`` follower has read the whole history (True) or ``stop`` is set (False).
    The follower waits for a broker that does not answer (:mod:`~streamgrpo.topics.reconnect`: bounded logs), so a
    trainer started before its broker waits instead of exiting into a restart loop; it beats ``heartbeat`` meanwhile
    (waiting is not hung). A follower that ended first raises its error (a missing topic, ...)."""
    waits = {asyncio.ensure_future(caught_up.wait()), follower}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        while not caught_up.is_set() and not (stop is not None and stop.is_set()):
            heartbeat.beat()
            done, _ = await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            if follower in done and not caught_up.is_set():
                follower.result()  # raises the follower's error
                raise TrainerError(f"the {catalog.ADAPTER_EVENTS} follower ended before reading the history")
    finally:
        for w in waits - {follower}:
            w.cancel()
    return caught_up.is_set() and not (stop is not None and stop.is_set())


async def run_trainer(cfg: TrainerConfig, kafka: KafkaSettings, stop: asyncio.Event | None = None
                      ) -> list[R.AdapterPublished]:
    """Resume, then train on ``training-samples``; returns the events published by this run."""
    state = await asyncio.to_thread(resume, cfg)
    producer = EventProducer(kafka, SERVICE)
    heartbeat = Heartbeat.configured()
    state.registry = AdapterRegistry(cfg.canary_share)
    following = asyncio.Event()
    reader = rollback.follower(state, kafka)
    follower = asyncio.create_task(reader.run(following))
    try:
        # the broker answers (waited for), and a rollback in the history applies first
        if not await history_read(reader.caught_up, follower, stop, heartbeat):
            log.info("stopped before %s was read (broker unreachable?): nothing consumed or committed",
                     catalog.ADAPTER_EVENTS)
            return []
        await asyncio.to_thread(announce_if_missing, producer, kafka, cfg)
        remembered = await asyncio.to_thread(remember_trained, state, kafka)
        if remembered:
            log.info("remembered the ids of %d samples the stored adapter was trained on (resends are dropped)",
                     remembered)
        async with EventConsumer(kafka, cfg.group_id, [SAMPLES_TOPIC], SERVICE, dlq=producer,
                                 commit_on_revoke=False, alive=heartbeat.beat, stop=stop) as consumer:
            return await train(consumer, producer, state, cfg, stop, heartbeat)
    finally:
        following.set()
        await follower
        producer.close()

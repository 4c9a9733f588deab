"""`replay train` on the real broker: a fixed range twice gives byte-identical adapters on CPU, from the
broker or the archive, trains exactly the range, and leaves the live run alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.samples import make_samples
from support.tiny_model import tiny_model

from streamgrpo.analysis.snapshot import snapshot
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.replay.cli import replay
from streamgrpo.replay.errors import ReplayError
from streamgrpo.replay.ranges import VersionBound, resolve
from streamgrpo.replay.sources import ArchiveHistory, BrokerHistory, published
from streamgrpo.replay.train import ReplayPlan, replay_train
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer
from streamgrpo.trainer.config import TrainerConfig
from streamgrpo.trainer.loop import run_trainer

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    model, tok = tiny_model(0)
    path = tmp_path_factory.mktemp("tiny-base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model, tok


def config(base: Path, store_root: Path, **kw: object) -> TrainerConfig:
    return TrainerConfig(base_model=str(base), adapter_store=store_root, device="cpu", lora_rank=4, lora_alpha=8,
                         samples_per_step=2, publish_every=1, micro_batch_tokens=128, idle_exit_s=3.0,
                         poll_timeout_ms=200, lr=1e-3, max_staleness=4, **kw)  # type: ignore[arg-type]


def lineage_offsets(events: list[R.AdapterPublished]) -> set[tuple[int, int]]:
    return {(r.partition, o) for e in events for r in e.lineage for o in range(r.start, r.end + 1)}


def test_replay_is_bitwise_repeatable_and_isolated(kafka_ns: KafkaSettings, tiny_base: tuple[Path, object, object],
                                                   tmp_path: Path) -> None:
    base, model, tok = tiny_base
    with EventProducer(kafka_ns, "test") as prod:
        for s in make_samples(tok, 8, seed=3, model=model):
            prod.send(s)
    live = asyncio.run(run_trainer(config(base, tmp_path / "live", max_steps=3), kafka_ns))
    assert [e.version for e in live] == [1, 2, 3]
    adapter_events_before = [r.event_id for r in _events(kafka_ns, "adapter-events")]

    history = BrokerHistory(kafka_ns)
    rng = resolve(VersionBound(1), VersionBound(2), published(history, "planner"))

    def run(name: str, root: Path, source: object = history, seed: int = 0) -> list[R.AdapterPublished]:
        plan = ReplayPlan(name, "planner", source, rng, adapter_name="planner-replay")  # type: ignore[arg-type]
        return replay_train(plan, config(base, root, seed=seed), kafka_ns).published

    first = run("r1", tmp_path / "s1")
    second = run("r2", tmp_path / "s2")
    assert [e.version for e in first] == [1, 2] and lineage_offsets(first) == lineage_offsets(live[:2])
    for v in (1, 2):
        a, b = store.version_dir(tmp_path / "s1", "planner-replay", v), store.version_dir(tmp_path / "s2", "planner-replay", v)
        assert (a / "adapter_model.safetensors").read_bytes() == (b / "adapter_model.safetensors").read_bytes()
        assert store.sha256_dir(a) == store.sha256_dir(b)  # every file: weights, optimizer state, manifest
    assert [e.sha256 for e in first] == [e.sha256 for e in second]
    assert [e.sha256 for e in run("r4", tmp_path / "s4", seed=1)][-1] != first[-1].sha256  # the seed matters

    archive = tmp_path / "archive"
    snapshot(kafka_ns, archive)
    from_archive = run("r3", tmp_path / "s3", ArchiveHistory(archive))
    assert [e.sha256 for e in from_archive] == [e.sha256 for e in first]  # same range from the archive: same bytes

    # the live run is untouched: its adapter events and its stored lineage are as they were
    assert [r.event_id for r in _events(kafka_ns, "adapter-events")] == adapter_events_before
    assert store.versions(tmp_path / "live", "planner") == [1, 2, 3]
    ns = kafka_ns.model_copy(update={"topic_prefix": kafka_ns.topic_prefix + "replay.r1."})
    assert [e.version for e in _events(ns, "adapter-events")] == [1, 2]
    with pytest.raises(ReplayError, match="already has versions"):
        run("r1", tmp_path / "s1")


def test_cli_replays_an_offset_range_from_the_archive(kafka_ns: KafkaSettings,
                                                      tiny_base: tuple[Path, object, object], tmp_path: Path) -> None:
    base, model, tok = tiny_base
    with EventProducer(kafka_ns, "test") as prod:
        for s in make_samples(tok, 6, seed=4, model=model):
            prod.send(s)
    records = read_topic(kafka_ns, "training-samples")
    archive = tmp_path / "archive"
    snapshot(kafka_ns, archive)
    cfg = tmp_path / "streamgrpo.toml"
    cfg.write_text(f'[loop]\nsamples_per_step = 2\nadapter_store = "{tmp_path / "store"}"\n\n[trainer]\n'
                   f'base_model = "{base}"\ndevice = "cpu"\nlora_rank = 4\nlora_alpha = 8\nlr = 0.001\n'
                   "micro_batch_tokens = 128\n")
    upper = ",".join(f"{p}:{min(r.offset for r in records if r.partition == p) + 1}" for p in {r.partition
                                                                                                for r in records})
    result = CliRunner().invoke(replay, ["train", "--run-name", "cli", "--archive", str(archive), "--to", upper,
                                         "--bootstrap", kafka_ns.bootstrap or "", "--topic-prefix",
                                         kafka_ns.topic_prefix], obj={"config_path": str(cfg)})
    assert result.exit_code == 0, result.output + repr(result.exception)
    partitions = len({r.partition for r in records})
    assert f"{partitions} TrainingSamples of planner in range" in result.output
    assert store.versions(tmp_path / "store", "planner-cli") == list(range(1, partitions // 2 + 1))
    assert f"{partitions % 2} sample(s) after the last full step not trained" in result.output


def _events(kafka: KafkaSettings, topic: str) -> list:
    return [r.event for r in read_topic(kafka, topic) if r.event is not None]

"""What an AdapterPublished says, v1-v4: typed fields (contract v4) first, the pre-v4 metric keys second.

Pre-v4 bytes are made with the RELEASED v3 schema (``avro/released/v3``) and decoded with today's reader, as a
replay of an old log does; the registry fold, the streams follower's dequeued count and ``run``'s progress read
them exactly as before, and read a v4 writer's typed fields whatever its metrics say.
"""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from fastavro import schemaless_writer

from streamgrpo.avro import records as R
from streamgrpo.avro import registry
from streamgrpo.avro.codec import SINGLE_OBJECT_MAGIC, Codec
from streamgrpo.cli.progress import Progress
from streamgrpo.lifecycle import published
from streamgrpo.lifecycle.registry import AdapterRegistry, Announcement, status
from streamgrpo.streams.follower import LoopView

T0 = datetime(2026, 1, 2, tzinfo=timezone.utc)
LINEAGE = [R.OffsetRange("training-samples", 0, 10, 19)]  # 10 records
LEGACY = {"loss": 0.25, "dropped_stale": 3.0, "dropped_duplicate": 2.0, "dropped_not_a_sample": 1.0,
          "max_staleness": 4.0}


def event(version: int, **fields: object) -> R.AdapterPublished:
    envelope = dataclasses.replace(R.Envelope.new("trainer"), event_time=T0 + timedelta(seconds=version))
    return R.AdapterPublished(envelope, "planner",
                              version, f"file:///a/{version}", "0" * 64, "base", version, list(LINEAGE),
                              version - 1 or None, **fields)  # type: ignore[arg-type]


def v3_bytes(e: R.AdapterPublished) -> bytes:
    """``e`` as a v3 writer sent it: the released v3 schema (no typed fields), its fingerprint."""
    old = registry.released()["v3"]["streamgrpo.events.AdapterPublished"]
    datum = e.to_avro()
    for name in ("drops", "samples_dequeued", "max_staleness", "auto_promote"):
        datum.pop(name)
    body = io.BytesIO()
    schemaless_writer(body, old.parsed, datum)
    return SINGLE_OBJECT_MAGIC + old.fingerprint + body.getvalue()


def from_v3(version: int, metrics: dict[str, float]) -> R.AdapterPublished:
    decoded = Codec().decode(v3_bytes(event(version, metrics=metrics)), R.AdapterPublished)
    assert isinstance(decoded, R.AdapterPublished)
    return decoded


def test_v3_bytes_read_through_the_old_metric_keys() -> None:
    e = from_v3(1, LEGACY)
    assert (e.drops, e.samples_dequeued, e.max_staleness, e.auto_promote) == (None, None, None, None)
    assert published.drops(e) == {"stale": 3, "duplicate": 2, "not_a_sample": 1}
    assert published.samples_dequeued(e) == 10 - 2 - 1  # duplicates and non-samples were never queued
    assert published.max_staleness(e) == 4
    assert published.auto_promote(e, 0.0) is True and published.auto_promote(e, 0.5) is False  # the reader decides
    ann = Announcement.of(e)
    assert (ann.dropped, ann.samples_dequeued, ann.max_staleness, ann.auto_promote) == (
        {"stale": 3, "duplicate": 2, "not_a_sample": 1}, 7, 4, None)


def test_v3_bytes_without_the_keys_read_as_nothing_recorded() -> None:
    e = from_v3(1, {"loss": 0.25})
    assert published.drops(e) == {} and published.samples_dequeued(e) == 10 and published.max_staleness(e) is None


def test_typed_fields_win_over_the_metric_keys() -> None:
    e = event(1, metrics=LEGACY, drops={"stale": 1}, samples_dequeued=6, max_staleness=2, auto_promote=False)
    assert published.drops(e) == {"stale": 1}
    assert published.samples_dequeued(e) == 6
    assert published.max_staleness(e) == 2
    assert published.auto_promote(e, 0.0) is False  # recorded: the reader's canary_share does not decide
    typed_empty = event(1, metrics=LEGACY, drops={}, samples_dequeued=10, max_staleness=0, auto_promote=True)
    assert published.drops(typed_empty) == {} and published.max_staleness(typed_empty) == 0


def test_the_writer_fills_every_typed_field_and_they_survive_the_wire() -> None:
    facts = published.typed_fields(Counter(stale=2, duplicate=1, malformed=0), LINEAGE, 3, canary_share=0.0)
    assert facts == {"drops": {"stale": 2, "duplicate": 1}, "samples_dequeued": 9, "max_staleness": 3,
                     "auto_promote": True}
    assert published.typed_fields({}, LINEAGE, 3, canary_share=0.25)["auto_promote"] is False
    e = event(1, metrics={"loss": 0.1}, **facts)
    decoded = Codec().decode(Codec().encode(e), R.AdapterPublished)
    assert decoded == e
    assert published.drops(decoded) == {"stale": 2, "duplicate": 1} and published.samples_dequeued(decoded) == 9


@pytest.mark.parametrize("reader_share", [0.0, 0.5])
def test_every_reader_derives_the_primary_from_the_recorded_decision(reader_share: float) -> None:
    """v4: the publisher's auto_promote decides, whatever canary_share the reader was handed."""
    reg = AdapterRegistry(reader_share)
    reg.apply(event(1, auto_promote=True))
    reg.apply(event(2, auto_promote=False))
    assert reg.primary("planner") == 1
    assert reg.status("planner", 2) in (R.AdapterStatus.CANARY, R.AdapterStatus.CANDIDATE)


@pytest.mark.parametrize("reader_share, primary", [(0.0, 2), (0.5, 0)])
def test_pre_v4_announcements_are_promoted_by_the_readers_setting_as_before(reader_share: float,
                                                                            primary: int) -> None:
    reg = AdapterRegistry(reader_share)
    for v in (1, 2):
        reg.apply(from_v3(v, {"loss": 0.1}))
    assert reg.primary("planner") == primary
    assert status(reg.line("planner"), 2) == (R.AdapterStatus.PRIMARY if primary else R.AdapterStatus.CANARY)


def test_the_follower_counts_dequeued_samples_from_either_form() -> None:
    view = LoopView(canary_share=0.0)
    view.apply(from_v3(1, LEGACY))  # 10 records, 3 never queued
    view.apply(event(2, drops={"duplicate": 5}, samples_dequeued=4))  # typed: 4, not 10 - 5
    assert view.consumed == 7 + 4


def test_progress_sums_drops_from_either_form() -> None:
    progress = Progress(canary_share=0.0)
    progress.apply(from_v3(1, LEGACY))
    progress.apply(event(2, metrics={"dropped_stale": 100.0}, drops={"stale": 1, "rolled_back": 2}))
    assert progress.loop_closure()["samples_dropped"] == {"stale": 4.0, "duplicate": 2.0, "not_a_sample": 1.0,
                                                          "rolled_back": 2.0}


@pytest.mark.parametrize("reader_share", [0.0, 0.5])
def test_readers_with_different_settings_agree_on_primary_and_canary_of_a_v4_log(reader_share: float) -> None:
    """The question of the issue: `status` with another config must not derive another primary or canary."""
    reg = AdapterRegistry(reader_share)
    for v in (1, 2, 3):
        reg.apply(event(v, auto_promote=False))  # the trainer runs A/B tests: every version is tested
    line = reg.line("planner")
    assert (line.primary, line.canary, line.candidates) == (0, 3, [1, 2, 3])
    reg.apply(event(4, auto_promote=True))  # a trainer without A/B tests: promoted on publication
    line = reg.line("planner")
    assert (line.primary, line.canary, line.candidates) == (4, None, [])

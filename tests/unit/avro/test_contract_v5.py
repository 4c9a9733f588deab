"""Contract v5: where a trajectory came from -- ``Task`` / ``RolloutRequest.demonstration`` (the planner's replies,
given) and ``demo_source`` on PlannerAction, RolloutCompleted, Reward and TrainingSample -- read both ways.

Backward (a v5 reader on v1-v4 bytes: no demonstration, every ``demo_source`` null) is also covered for every type
by the golden-bytes test of test_avro_codec.py; here the v5 fields are named. Forward (a v4 reader on v5 bytes):
the schemas resolve, so a v4 service given the writer schema (the Confluent wire format) reads v5 events without
the new fields -- and so a v4 trainer would train a demonstration's sample as a policy sample: upgrade readers
first (the compat module's rule). In the single-object encoding a v4 service rejects v5 bytes with a reason.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from fastavro import schemaless_reader
from fixtures.sample_events import sample_events

from streamgrpo.avro import compat, registry
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden"
V5_TYPES = ("Task", "RolloutRequest", "PlannerAction", "RolloutCompleted", "Reward", "TrainingSample")


def golden(version: str, name: str) -> bytes:
    return (GOLDEN / version / f"streamgrpo.events.{name}.bin").read_bytes()


def test_v5_is_released_verbatim_with_golden_bytes_that_carry_a_demonstration() -> None:
    assert "v5" in registry.released()
    for path in registry.SCHEMA_DIR.glob("*.avsc"):
        assert (registry.RELEASED_DIR / "v5" / path.name).read_text() == path.read_text(), path.name
    task = Codec().decode(golden("v5", "Task"), R.Task)
    assert task.demonstration == R.Demonstration(['{"tool": "calculator", "input": "12**2"}', '{"answer": "144"}'],
                                                 "file:demos.jsonl")
    sample = Codec().decode(golden("v5", "TrainingSample"), R.TrainingSample)
    assert sample.demo_source == "file:demos.jsonl"


def test_v1_to_v4_bytes_read_as_sampled_by_the_policy() -> None:
    for version in ("v1", "v2", "v3", "v4"):
        for name in V5_TYPES:
            event = Codec().decode(golden(version, name))
            assert getattr(event, "demonstration", None) is None and getattr(event, "demo_source", None) is None


def test_v4_readers_resolve_v5_bytes_given_the_writer_schema() -> None:
    assert compat.check_forward("v4") == {}
    for name in V5_TYPES:
        full = f"streamgrpo.events.{name}"
        old = schemaless_reader(io.BytesIO(golden("v5", name)[10:]), registry.current()[full].parsed,
                                registry.released()["v4"][full].parsed)
        assert "demonstration" not in old and "demo_source" not in old


def test_a_v4_service_rejects_v5_single_object_bytes_with_a_reason(tmp_path: Path) -> None:
    for version in ("v1", "v2", "v3", "v4"):
        (tmp_path / version).symlink_to(registry.RELEASED_DIR / version)
    (tmp_path / "event.bin").write_bytes(golden("v5", "Task"))
    code = (
        "from pathlib import Path; from streamgrpo.avro import registry\n"
        f"root = Path({str(tmp_path)!r})\n"
        "registry.SCHEMA_DIR = registry.RELEASED_DIR / 'v4'; registry.RELEASED_DIR = root\n"
        "from streamgrpo.avro.codec import Codec\nfrom streamgrpo.avro.errors import DecodeError\n"
        "try:\n    Codec().decode((root / 'event.bin').read_bytes())\n"
        "except DecodeError as exc:\n    print('rejected:', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rejected:" in proc.stdout and "unknown schema fingerprint" in proc.stdout


def test_every_v5_sample_event_round_trips_its_demonstration_fields() -> None:
    events = [e for e in sample_events() if type(e).__name__ in V5_TYPES]
    assert len(events) == len(V5_TYPES)
    for e in events:
        assert Codec().decode(Codec().encode(e)) == e

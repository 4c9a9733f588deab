"""Contract v4: what changed (AdapterPublished's typed facts, PlannerAction.role), read both ways.

Backward (a v4 reader on v1-v3 bytes) is also covered for every type by the golden-bytes test of
test_avro_codec.py; here the v4 fields are named. Forward (a v3 reader on v4 bytes): the schemas resolve, so
a v3 service given the writer schema (the Confluent wire format) reads v4 events without the new fields; in the
single-object encoding a v3 service does not know v4's fingerprints and rejects the bytes with a reason.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from fastavro import schemaless_reader
from fixtures.sample_events import sample_events

from streamgrpo.avro import compat, registry
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec

GOLDEN = Path(__file__).parents[2] / "fixtures" / "golden"
V4_PUBLISHED = ("drops", "samples_dequeued", "max_staleness", "auto_promote")


def golden(version: str, name: str) -> bytes:
    return (GOLDEN / version / f"streamgrpo.events.{name}.bin").read_bytes()


def test_v4_stays_released_with_golden_bytes() -> None:
    assert "v4" in registry.released()  # verbatim today's schemas until v5 (test_contract_v5.py)
    published = Codec().decode(golden("v4", "AdapterPublished"), R.AdapterPublished)
    assert (published.drops, published.samples_dequeued, published.max_staleness, published.auto_promote) == (
        {"stale": 2, "duplicate": 1}, 9, 2, True)


def test_v1_to_v3_bytes_read_the_v4_fields_as_their_defaults() -> None:
    for version in ("v1", "v2", "v3"):
        published = Codec().decode(golden(version, "AdapterPublished"), R.AdapterPublished)
        assert [getattr(published, f) for f in V4_PUBLISHED] == [None] * 4, version
        action = Codec().decode(golden(version, "PlannerAction"), R.PlannerAction)
        assert action.role == "planner", version  # only the planner wrote actions before v4


def test_a_role_other_than_the_planners_survives_the_wire() -> None:
    action = next(e for e in sample_events() if isinstance(e, R.PlannerAction))
    executor = R.PlannerAction(**{**action.__dict__, "role": "executor"})
    assert Codec().decode(Codec().encode(executor), R.PlannerAction).role == "executor"


def test_v3_readers_resolve_v4_bytes_given_the_writer_schema() -> None:
    """What a v3 service reads from a v4 writer in the Confluent wire format: the v3 fields, new ones skipped."""
    assert compat.check_forward("v3") == {}
    for name, kind in (("AdapterPublished", R.AdapterPublished), ("PlannerAction", R.PlannerAction)):
        full = f"streamgrpo.events.{name}"
        body = golden("v4", name)[10:]
        old = schemaless_reader(io.BytesIO(body), registry.released()["v4"][full].parsed,
                                registry.released()["v3"][full].parsed)
        expected = next(e for e in sample_events("v4") if isinstance(e, kind)).to_avro()
        for field in (*V4_PUBLISHED, "role", "demo_source"):
            expected.pop(field, None)
        assert set(old) == set(expected)
        assert old["adapter_name"] == expected["adapter_name"]


def test_check_forward_names_a_field_an_old_reader_needs_and_no_longer_gets(tmp_path: Path) -> None:
    released = tmp_path / "v1"
    released.mkdir()
    for path in registry.SCHEMA_DIR.glob("*.avsc"):
        raw = json.loads(path.read_text())
        if raw["name"] == "Verdict":
            raw["fields"].append({"name": "confidence", "type": "double", "doc": "a field today's writer lacks"})
        (released / path.name).write_text(json.dumps(raw))
    code = ("import sys; from pathlib import Path; from streamgrpo.avro import registry, compat;"
            f"registry.RELEASED_DIR = Path({str(tmp_path)!r}); print(compat.check_forward('v1'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Verdict" in proc.stdout and "confidence" in proc.stdout


def test_a_v3_service_rejects_v4_single_object_bytes_with_a_reason(tmp_path: Path) -> None:
    """A v3 codec (schemas = released v3, released = v1..v3) on v4 bytes: a DecodeError naming the unknown
    fingerprint (a dead letter with that reason), not a crash and not a silent misread."""
    for version in ("v1", "v2", "v3"):
        (tmp_path / version).symlink_to(registry.RELEASED_DIR / version)
    (tmp_path / "event.bin").write_bytes(golden("v4", "AdapterPublished"))
    code = (
        "import sys; from pathlib import Path; from streamgrpo.avro import registry\n"
        f"root = Path({str(tmp_path)!r})\n"
        "registry.SCHEMA_DIR = registry.RELEASED_DIR / 'v3'; registry.RELEASED_DIR = root\n"
        "from streamgrpo.avro.codec import Codec\nfrom streamgrpo.avro.errors import DecodeError\n"
        "assert 'v4' not in registry.released()\n"
        "try:\n    Codec().decode((root / 'event.bin').read_bytes())\n"
        "except DecodeError as exc:\n    print('rejected:', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rejected:" in proc.stdout and "unknown schema fingerprint" in proc.stdout

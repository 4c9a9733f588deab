"""Which dead letters a record of ``adapter-events`` calls for (pure part of the streams follower's refusals)."""

from __future__ import annotations

from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import Refused
from streamgrpo.streams.follower import LoopView
from streamgrpo.streams.refusals import letters_of
from streamgrpo.topics.received import Received


def record(event: R.Event | None, offset: int, error_code: str | None = None) -> Received:
    return Received(event, "adapter-events", 0, offset, b"planner", b"bytes", 0, error="bad bytes" if error_code else None,
                    error_code=error_code)


def test_one_letter_per_refusal_or_decoding_error_and_none_for_a_good_announcement() -> None:
    view = LoopView(canary_share=0.0)
    good = R.AdapterPublished(R.Envelope.new("trainer"), "planner", 1, "file:///a/1", "ab" * 32, "base", 1, [])
    forged = R.AdapterPublished(R.Envelope.new("trainer"), "planner", -1, "file:///x", "0" * 64, "base", 1, [])
    assert letters_of(record(good, 0), view.apply(good)) == []
    (letter,) = letters_of(record(forged, 1), refusals := view.apply(forged))
    assert refusals == [Refused("planner", -1, refusals[0].reason)] and letter[1] == "adapter_lineage"
    assert letter[2].startswith("AdapterPublished planner@v-1 refused: version -1 is not a published version")
    assert letters_of(record(None, 2, "decode_error"), []) == [(record(None, 2, "decode_error"), "decode_error",
                                                                "bad bytes")]
    assert view.adapters("planner").primary == 1
    rollback = R.AdapterRolledBack(R.Envelope.new("forger"), "planner", 1, 0, "forged")  # no operator identity
    (letter,) = letters_of(record(rollback, 3), refusals := view.apply(rollback))
    assert refusals[0].event_type == "AdapterRolledBack" and letter[1] == "adapter_lineage"
    assert letter[2].startswith("AdapterRolledBack planner@v1 refused: AdapterRolledBack of v1 written by 'forger'")
    assert view.adapters("planner").primary == 1

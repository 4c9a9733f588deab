"""The evaluator's fold of ``adapter-events`` and ``evaluations`` (evaluation/service.py ``Announcements``): the
announced versions of its adapter only, a re-announced version replaces the earlier event (as the former
per-poll read did), and each evaluation is handed over once."""

from __future__ import annotations

import pytest
from fixtures.sample_events import sample_events

from streamgrpo.avro import records as R
from streamgrpo.evaluation.service import Announcements, Evaluator, EvaluatorSettings


def _published(name: str, version: int, sha: str = "0" * 64) -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name=name, version=version,
                              uri=f"file:///store/{name}/v{version}", sha256=sha, base_model="m",
                              trainer_step=version, lineage=[])


def test_the_fold_keeps_its_adapters_versions_and_hands_each_evaluation_over_once() -> None:
    fold = Announcements("planner")
    for event in [_published("planner", 1), _published("other", 2), _published("planner", 3),
                  _published("planner", 1, sha="1" * 64)]:
        fold.apply(event)
    published = fold.published()
    assert sorted(published) == [1, 3]
    assert published[1].sha256 == "1" * 64
    published.clear()  # a copy: the fold is not changed by its reader
    assert sorted(fold.published()) == [1, 3]
    assert fold.take_evaluations() == []
    [evaluation] = [e for e in sample_events() if isinstance(e, R.EvaluationCompleted)]
    fold.apply(evaluation)
    assert fold.take_evaluations() == [evaluation]
    assert fold.take_evaluations() == []


class _Session:
    """What :class:`Evaluator` reads of its session to choose a version (no model is loaded by ``pending``)."""

    def spec(self, tasks: str, batch_size: int) -> None:
        return None


def _evaluator(**settings: object) -> Evaluator:
    class Row:
        question, ground_truths, metadata = "What is 2 + 2?", ["4"], {"kind": "arithmetic"}

    return Evaluator(EvaluatorSettings(metrics_port=0, **settings), _Session(), [Row()])


def test_after_the_base_the_newest_version_is_evaluated_at_most_once_per_interval() -> None:
    ev = _evaluator(interval_s=300.0)
    published = {v: _published("planner", v) for v in (1, 2)}
    assert ev.pending(published, now=0.0) == 0, "the base first, whatever the interval"
    ev.done.add(0)
    ev.last_started = 0.0
    assert ev.pending(published, now=299.0) is None, "not before interval_s has passed since the last start"
    published[3] = _published("planner", 3)
    assert ev.pending(published, now=300.0) == 3, "then the newest pending version, not the oldest"
    ev.done.add(3)
    ev.last_started = 300.0
    assert ev.pending(published, now=599.9) is None
    assert ev.pending(published, now=600.0) == 2
    assert _evaluator(interval_s=0.0, include_base=False).pending(published, now=0.0) == 3


def test_a_version_that_does_not_verify_does_not_use_up_the_interval(tmp_path: object) -> None:
    from streamgrpo.errors import StreamGRPOError

    ev = _evaluator(interval_s=300.0, include_base=False)

    class Loop:
        adapter_name = "planner"

    ev.session.loop = Loop()  # type: ignore[attr-defined]
    ev.session.store = tmp_path  # type: ignore[attr-defined]
    forged = {7: _published("planner", 7)}  # its uri is outside the store: it cannot load
    with pytest.raises(StreamGRPOError):
        ev.evaluate(7, forged)
    assert ev.last_started is None
    assert ev.pending({**forged, 8: _published("planner", 8)}, now=1.0) == 8


def test_the_in_loop_sample_takes_each_kind_in_proportion_unless_told_to_take_the_first() -> None:
    class Row:
        def __init__(self, kind: str, n: int) -> None:
            self.question, self.ground_truths, self.metadata = f"q{n}", ["1"], {"kind": kind}

    rows = [Row("a" if n % 2 == 0 else "b", n) for n in range(8)] + [Row("a", n) for n in range(8, 20)]  # 16 a, 4 b
    proportional = Evaluator(EvaluatorSettings(metrics_port=0, limit=5), _Session(), rows)
    assert [r.metadata["kind"] for r in proportional.rows].count("a") == 4
    first = Evaluator(EvaluatorSettings(metrics_port=0, limit=5, sample="first"), _Session(), rows)
    assert [r.question for r in first.rows] == ["q0", "q1", "q2", "q3", "q4"]
    assert proportional.task_hash != first.task_hash, "a restarted evaluator does not mistake one sample for the other"

"""The evaluator's fold of ``adapter-events`` and ``evaluations`` (evaluation/service.py ``Announcements``): the
announced versions of its adapter only, a re-announced version replaces the earlier event (as the former
per-poll read did), and each evaluation is handed over once."""

from __future__ import annotations

from fixtures.sample_events import sample_events

from streamgrpo.avro import records as R
from streamgrpo.evaluation.service import Announcements


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

"""``sample_lineage`` after a rollback: samples of the discarded branch are ``rolled_back``, not trained, and
staleness counts along the lineage -- the trainer's rule (lifecycle.pacing over the registry fold), in SQL.

History: v1 <- v2 <- v3 published, v3 rolled back to v1 (v2 and v3 discarded), then v4 <- v5 from v1, with
``max_staleness`` 1. Each version's lineage holds samples of the versions listed in :data:`BATCHES`. The trainer
records ``max_staleness`` as the typed field (contract v4), as a metric key (before v4), or as a metric key in an
archive whose files predate the v4 columns (:data:`FORMS`); the view reads the same from all three.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.history import SyntheticLog, env

from streamgrpo.analysis.views import connect
from streamgrpo.archive.store import ArchiveWriter, parts, type_dir
from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.registry import AdapterRegistry, ancestors
from streamgrpo.topics import catalog

PARENTS = {1: None, 2: 1, 3: 2, 4: 1, 5: 4}
#: version -> the behaviour versions of the samples its lineage covers
BATCHES = {1: [0, 0], 2: [1, 0], 3: [2, 1], 4: [3, 2, 1, 0], 5: [4, 1, 0]}
MAX_STALENESS = 1
#: how the announcements record max_staleness: v4 typed field / pre-v4 metric key / pre-v4 key in pre-v4 files
FORMS = ("typed", "metric", "metric-in-old-files")
V4_COLUMNS = ("drops", "samples_dequeued", "max_staleness", "auto_promote")


def history(form: str = "typed") -> SyntheticLog:
    log, t = SyntheticLog(), 0.0
    for version, behaviours in BATCHES.items():
        first = None
        for i, b in enumerate(behaviours):
            t += 1
            sample = R.TrainingSample(env("s", t, task_id="t", group_id="g", rollout_id=f"r{version}-{i}"),
                                      [R.SampleTurn(1, [1, 2], [10], [-0.5])], 1.0, 1.0, 0.5, 0.5, 2, "grpo",
                                      "planner", b)
            log.put(sample)
            first = first if first is not None else log.place_of(sample.event_id)
        last = log.records[-1][1]
        assert first is not None and first.partition == last.partition
        t += 1
        log.put(R.AdapterPublished(env("pub", t, task_id=str(version)), "planner", version, f"file:///a/v{version}",
                                   "a" * 64, "base", version,
                                   [R.OffsetRange("training-samples", last.partition, first.offset, last.offset)],
                                   PARENTS[version], **recorded(form)))
        if version == 3:
            t += 1
            by_controller = replace(env("rb", t, task_id="3"), producer=R.Producer("ab-controller", "h:1"))
            log.put(R.AdapterRolledBack(by_controller, "planner", 3, 1, "worse than v1"))
    return log


def recorded(form: str) -> dict[str, object]:
    if form == "typed":
        return {"metrics": {"loss": 0.5}, "max_staleness": MAX_STALENESS, "drops": {}, "samples_dequeued": 0}
    return {"metrics": {"max_staleness": float(MAX_STALENESS)}}


def strip_v4_columns(root: Path) -> None:
    """Rewrite the archived AdapterPublished files as a pre-v4 archive wrote them: without the v4 columns."""
    import pyarrow.parquet as pq

    directory = type_dir(root, catalog.ADAPTER_EVENTS, R.AdapterPublished.SCHEMA_NAME)
    files = parts(directory)
    assert files
    for path in files:
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(list(V4_COLUMNS)), path)


def trainer_rule(log: SyntheticLog) -> dict[tuple[int, int], tuple[str | None, int]]:
    """(version, behaviour) -> (drop reason, versions behind) as the trainer decides it: the pacing rule on the
    registry fold as it stood when the version's samples were taken (just before its publication)."""
    registry, out = AdapterRegistry(), {}
    for event, _ in log.records:
        if isinstance(event, R.AdapterPublished):
            line, weights = registry.line("planner"), event.parent_version or 0
            chain = ancestors(line, weights)
            for b in BATCHES[event.version]:
                out[(event.version, b)] = (pacing.drop_reason(b, weights, MAX_STALENESS, discarded=line.discarded,
                                                              chain=chain),
                                           pacing.versions_behind(weights, b, chain))
        registry.apply(event)
    return out


@pytest.fixture(scope="module", params=FORMS)
def rows(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[tuple[int, int], tuple[str | None, int]]:
    root: Path = tmp_path_factory.mktemp("archive")
    log = history(request.param.removesuffix("-in-old-files"))
    writer = ArchiveWriter(root)
    writer.add_all(log.records)
    writer.flush()
    if request.param == "metric-in-old-files":
        strip_v4_columns(root)
    con = connect(root)
    try:
        got = con.execute("SELECT trained_version, behaviour_version, drop_reason, staleness FROM sample_lineage"
                          ).fetchall()
    finally:
        con.close()
    assert len(got) == sum(len(b) for b in BATCHES.values())
    return {(v, b): (reason, staleness) for v, b, reason, staleness in got}


def test_samples_of_the_discarded_branch_are_rolled_back_not_trained(rows) -> None:
    assert rows[(4, 3)][0] == "rolled_back" and rows[(4, 2)][0] == "rolled_back"
    assert rows[(4, 1)] == (None, 0) and rows[(4, 0)] == (None, 1)
    assert rows[(3, 2)] == (None, 0) and rows[(3, 1)] == (None, 1)  # trained before the rollback: trained


def test_staleness_counts_along_the_lineage_after_a_rollback(rows) -> None:
    assert rows[(5, 4)] == (None, 0)
    assert rows[(5, 1)] == (None, 1)  # v4's parent: one publication behind, not 4 - 1 = 3
    assert rows[(5, 0)] == ("stale", 2)


def test_the_view_agrees_with_the_trainers_rule_for_every_sample(rows) -> None:
    assert rows == trainer_rule(history())


@pytest.mark.parametrize("behaviour, weights, depth, discarded", [
    (b, w, d, x) for b in range(4) for w in range(4) for d in (None, 1, 2) for x in (False, True)])
def test_the_sql_rule_is_the_python_rule(behaviour: int, weights: int, depth: int | None, discarded: bool) -> None:
    import duckdb

    chain = [99] * (depth - 1) + [behaviour] if depth is not None else None
    behind = pacing.versions_behind_sql("w", "b", "d")
    sql = (f"SELECT {behind}, {pacing.drop_reason_sql('x', behind, 'm')} "
           "FROM (SELECT ?::INT b, ?::INT w, ?::INT d, ?::BOOLEAN x, ?::INT m)")
    with duckdb.connect() as con:
        got = con.execute(sql, [behaviour, weights, depth, discarded, MAX_STALENESS]).fetchall()
    assert got == [(pacing.versions_behind(weights, behaviour, chain),
                    pacing.drop_reason(behaviour, weights, MAX_STALENESS, discarded={behaviour} if discarded else (),
                                       chain=chain))]

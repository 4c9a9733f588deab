"""An announced version whose files do not verify is rolled back by the A/B controller (lifecycle/file_check.py,
streams/ab_controller.py): the issue's forged announcement that FOLLOWS its lineage (the next version, an announced
parent, a sha256 of zeros, no files) used to become the primary, and every new group was requested on a version no
worker could load. Real files in a temporary adapter store; the real registry fold."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.adapter_files import write_version

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.file_check import FileCheck, problem, to_check
from streamgrpo.lifecycle.registry import AdapterRegistry, Announcement
from streamgrpo.models import adapter_store as store
from streamgrpo.streams.ab_controller import SERVICE, Lifecycle, files_rollback, policy_from
from streamgrpo.streams.config import StreamsSettings


def published(version: int, parent: int | None, uri: str, sha256: str, auto_promote: bool = True
              ) -> R.AdapterPublished:
    return R.AdapterPublished(R.Envelope.new("trainer", event_id=ids.adapter_published_id("planner", version)),
                              "planner", version, uri, sha256, "base", version, [], parent_version=parent,
                              auto_promote=auto_promote)


def test_a_version_verifies_only_inside_the_store_with_its_files_and_their_sha256(tmp_path: Path) -> None:
    root = tmp_path / "store"
    uri, sha = write_version(root, 1)
    assert problem(Announcement.of(published(1, None, uri, sha)), root) is None
    wrong = problem(Announcement.of(published(1, None, uri, "0" * 64)), root)
    assert wrong is not None and wrong[1] and "the announcing event says 000000" in wrong[0]
    missing = problem(Announcement.of(published(2, 1, store.version_dir(root, "planner", 2).as_uri(), sha)), root)
    assert missing is not None and not missing[1] and "missing adapter_config.json" in missing[0]
    outside_uri, outside_sha = write_version(tmp_path / "elsewhere", 3)
    outside = problem(Announcement.of(published(3, 1, outside_uri, outside_sha)), root)
    assert outside is not None and outside[1] and "outside the adapter store" in outside[0]
    chained = problem(Announcement.of(published(4, 1, "simplecache::" + uri, sha)), root)
    assert chained is not None and chained[1] and "chained" in chained[0]
    assert problem(Announcement.of(published(5, 1, "s3://bucket/planner/v5", sha)), root) is None  # workers check


def test_missing_files_are_waited_for_then_final_and_a_mismatch_is_final_at_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    uri1, sha1 = write_version(root, 1)
    reg = AdapterRegistry()
    reg.apply(published(1, None, uri1, sha1))
    reg.apply(published(2, 1, store.version_dir(root, "planner", 2).as_uri(), "0" * 64))
    check = FileCheck(root, grace_s=60.0)
    assert [a.version for a in check.pending(reg.line("planner"))] == [2], "only the primary and above"
    [late] = check.pending(reg.line("planner"))
    check.check(late, now_s=100.0)
    check.check(late, now_s=159.0)
    assert check.failed == {} and [a.version for a in check.pending(reg.line("planner"))] == [2]
    check.check(late, now_s=160.0)
    assert "still missing after 60 s" in check.failed[2]
    assert check.pending(reg.line("planner")) == []

    uri3, _ = write_version(root, 3)
    reg.apply(published(3, 2, uri3, "f" * 64))  # files present, another sha256
    [forged] = [a for a in check.pending(reg.line("planner")) if a.version == 3]
    check.check(forged, now_s=200.0)
    assert "the announcing event says ffff" in check.failed[3]

    fresh = FileCheck(root, grace_s=60.0)
    uri4, sha4 = write_version(root, 4)
    reg.apply(published(4, 3, uri4, sha4))
    for ann in fresh.pending(reg.line("planner")):
        fresh.check(ann, now_s=0.0)
    assert 4 in fresh.verified and 4 not in fresh.failed


def test_the_controller_rolls_a_forged_primary_back_to_its_parent_and_the_line_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "store"
    life = Lifecycle("planner", 0.0, policy_from(StreamsSettings()), 0.5)
    life.files = FileCheck(root, grace_s=0.0)
    uri1, sha1 = write_version(root, 1)
    life.apply(published(1, None, uri1, sha1))
    life.apply(published(2, 1, store.version_dir(root, "planner", 2).as_uri(), "0" * 64))  # forged, follows the line
    assert life.line.primary == 2, "the fold alone makes it the primary: it cannot read files"
    for ann in life.files.pending(life.line):
        life.files.check(ann, now_s=0.0)
    assert life.files.verified == set() and set(life.files.failed) == {2}, "v1 is below the primary: not checked"
    [event] = life.next_events(now_s=0.0)
    assert isinstance(event, R.AdapterRolledBack)
    assert (event.version, event.restored_version, event.decided_by) == (2, 1, SERVICE)
    assert event.event_id == ids.rollback_id("planner", 2) and "do not verify in the adapter store" in event.reason
    assert life.next_events(now_s=1.0) == [], "nothing more until its own event is folded"
    life.apply(event)
    assert (life.line.primary, life.line.serves(2)) == (1, False)
    assert life.next_events(now_s=2.0) == [], "a discarded version is not rolled back again"
    assert to_check(life.line) == [1] and [a.version for a in life.files.pending(life.line)] == [1]

    uri3, sha3 = write_version(root, 3)  # the trainer, continuing from v1, publishes its next version
    life.apply(published(3, 1, uri3, sha3))
    for ann in life.files.pending(life.line):
        life.files.check(ann, now_s=3.0)
    assert life.line.primary == 3 and life.next_events(now_s=3.0) == []


def test_a_candidate_that_does_not_verify_is_rolled_back_to_the_primary(tmp_path: Path) -> None:
    root = tmp_path / "store"
    life = Lifecycle("planner", 0.5, policy_from(StreamsSettings(canary_share=0.5)), 0.5)
    uri1, sha1 = write_version(root, 1)
    uri2, sha2 = write_version(root, 2)
    life.apply(published(1, None, uri1, sha1))
    life.apply(published(2, 1, uri2, sha2, auto_promote=False))
    life.apply(published(3, 2, store.version_dir(root, "planner", 3).as_uri(), "0" * 64, auto_promote=False))
    assert (life.line.primary, life.line.canary) == (1, 3)
    event = files_rollback(life.line, "planner", 3, "missing files")
    assert event is not None and (event.version, event.restored_version) == (3, 1)
    life.apply(event)
    assert (life.line.primary, life.line.canary, life.line.serves(3)) == (1, None, False)
    assert files_rollback(life.line, "planner", 3, "again") is None
    assert files_rollback(life.line, "planner", 9, "never announced") is None


def test_a_store_this_worker_cannot_see_checks_nothing_and_rolls_nothing_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    reg = AdapterRegistry()
    reg.apply(published(1, None, store.version_dir(root, "planner", 1).as_uri(), "0" * 64))
    check = FileCheck(root, grace_s=0.0)
    with caplog.at_level(logging.ERROR, logger="streamgrpo.lifecycle.file_check"):
        for now in (0.0, 1.0):
            for ann in check.pending(reg.line("planner")):
                check.check(ann, now_s=now)
    assert check.failed == {} and check.verified == set()
    [said] = [r.getMessage() for r in caplog.records]
    assert "NOT checked" in said and "adapter_check = false" in said
    write_version(root, 1)  # the store appears: now v1 is checked (its announced sha256 is not its files')
    for ann in check.pending(reg.line("planner")):
        check.check(ann, now_s=2.0)
    assert set(check.failed) == {1}

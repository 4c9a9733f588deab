"""Whether an ``AdapterPublished`` follows its adapter line's lineage (pure; the registry fold asks).

One forged announcement (version 2147483647, no files, a zero sha256) used to become PRIMARY, and the
fan-out then requested every new group on a version no worker could load. A forged version 64 past the newest
(issue 38, finding 1) was accepted and rolled back at once, but it stayed the line's newest version, so every
version the real trainer published next was "not newer" and refused: its samples never left the fan-out's queue
count and admission stopped requesting groups. The trainer publishes the versions of a line one after another
(version = the line's newest + 1, whatever its parent: after a rollback the parent is the restored primary), each
trained from an announced parent, so the fold of :mod:`streamgrpo.lifecycle.registry` refuses an announcement (it
changes nothing, logged and counted) when:

- its version is below 1 (0 is the base model, never published);
- its parent is itself, is newer than it, or was never announced (0, the base model, always is);
- it is not newer than the newest announced version;
- it jumps more than :data:`MAX_VERSION_GAP` past the newest announced version, or skips any version at all
  (it is not the newest + 1): a gap is forged or lost history, and would take the real trainer's next number;
- it announces an announced version again with another sha256 (:func:`reannounced`; the same version
  with the same sha256 is a redelivery, which changes nothing and is no refusal).

The fold also refuses an announcement whose typed facts are out of their domain
(:func:`streamgrpo.lifecycle.published.out_of_domain`). It returns a :class:`~streamgrpo.lifecycle.registry.Refused`
change with the reason; the streams follower turns each refused record into one dead letter (reason code
:data:`REASON_CODE`, :mod:`streamgrpo.streams.refusals`); the other readers log and count it.
What is not covered: the adapter's files and sha256 (a pure fold cannot read them: a rollout worker
verifies them before it loads a version and refuses it, logged and counted; the A/B controller rolls it back), a
forged announcement of exactly the next version (it takes that number; the real trainer's announcement of it is then
refused as another sha256, and its next one, whose parent is the forged version, is born rolled back once the
controller rolls the forgery back), and who may write ``adapter-events`` (:mod:`streamgrpo.lifecycle.writers`,
Kafka ACLs).
"""

from __future__ import annotations

from collections.abc import Collection

from streamgrpo.avro import records as R

#: A jump past the newest announced version that the reason calls a jump (any gap is refused: the trainer
#: publishes consecutive versions; a larger one is named as such in the dead letter).
MAX_VERSION_GAP = 64
#: The dead-letter reason code of a refused announcement.
REASON_CODE = "adapter_lineage"


def refusal(event: R.AdapterPublished, announced: Collection[int], latest: int) -> str | None:
    """Why ``event`` does not follow a line whose announced versions are ``announced`` (newest
    ``latest``); None when it does. ``event.version`` is not yet in ``announced``."""
    v, parent = event.version, event.parent_version or 0
    if v < 1:
        return f"version {v} is not a published version (versions start at 1; 0 is the base model)"
    if parent == v:
        return f"v{v} names itself as its parent"
    if parent > v:
        return f"v{v} names a newer version, v{parent}, as its parent"
    if parent != 0 and parent not in announced:
        return f"v{v} names v{parent} as its parent, which was never announced"
    if v <= latest:
        return f"v{v} is not newer than v{latest}, the newest announced version (versions only grow)"
    if v > latest + MAX_VERSION_GAP:
        return f"v{v} jumps more than {MAX_VERSION_GAP} versions past v{latest}, the newest announced version"
    if v != latest + 1:
        return (f"v{v} skips v{latest + 1}: the next version of the line is v{latest + 1} (the trainer publishes one "
                f"version after another; a gap would refuse its next ones)")
    return None


def reannounced(event: R.AdapterPublished, announced_sha256: str) -> str | None:
    """Why ``event``, naming an announced version, is refused: another sha256 than the announced one
    (None: the same content, a redelivery)."""
    if event.sha256 == announced_sha256:
        return None
    return (f"v{event.version} was announced with sha256 {announced_sha256[:12]}...; a second announcement with "
            f"sha256 {event.sha256[:12]}... changes nothing (a version is never re-announced with other content)")

"""Whether an ``AdapterPublished`` follows its adapter line's lineage (pure; the registry fold asks).

One forged announcement (version 2147483647, no files, a zero sha256) used to become PRIMARY, and the
fan-out then requested every new group on a version no worker could load. The trainer publishes
the versions of a line one after another, each trained from an announced parent, so the fold of
:mod:`streamgrpo.lifecycle.registry` refuses an announcement (it changes nothing, logged) when:

- its version is below 1 (0 is the base model, never published);
- its parent is itself, is newer than it, or was never announced (0, the base model, always is);
- it is not newer than the newest announced version;
- it jumps more than :data:`MAX_VERSION_GAP` past the newest announced version;
- it announces an announced version again with another sha256 (:func:`reannounced`; the same version
  with the same sha256 is a redelivery, which changes nothing and is no refusal).

The fold returns a :class:`~streamgrpo.lifecycle.registry.Refused` change with the reason; the streams
follower turns each refused record into one dead letter (reason code :data:`REASON_CODE`,
:mod:`streamgrpo.streams.refusals`); the other readers log it.
What is not covered: the adapter's files and sha256 (a pure fold cannot read them: a rollout worker
verifies them before it loads a version and refuses it, logged and counted; the fan-out does not), and
who may write ``adapter-events`` (Kafka ACLs).
"""

from __future__ import annotations

from collections.abc import Collection

from streamgrpo.avro import records as R

#: Largest step from the newest announced version to a new one. The trainer publishes consecutive
#: versions; a larger jump is forged or lost history (and would leave the line unable to follow).
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
    return None


def reannounced(event: R.AdapterPublished, announced_sha256: str) -> str | None:
    """Why ``event``, naming an announced version, is refused: another sha256 than the announced one
    (None: the same content, a redelivery)."""
    if event.sha256 == announced_sha256:
        return None
    return (f"v{event.version} was announced with sha256 {announced_sha256[:12]}...; a second announcement with "
            f"sha256 {event.sha256[:12]}... changes nothing (a version is never re-announced with other content)")

"""Manual lifecycle actions (pure): what a person may do to an adapter version now, as the event that does it.

Each function checks the action against the registry's current :class:`~streamgrpo.lifecycle.registry.Line`
and returns the event to write on ``adapter-events`` (the operator in ``decided_by`` / ``by`` as
``human:<name>``, and their reason), or raises :class:`~streamgrpo.models.errors.AdapterActionError`
saying why not and what to do instead:

- :func:`promote`: a published version above the primary that was not rolled back or rejected
  becomes the primary (an older one: roll back to it instead).
- :func:`rollback`: ``version`` defaults to the canary (the training line under test), else the
  primary; ``to`` defaults to the primary for a candidate, and for the primary to its nearest
  ancestor still good (the base model at worst). Everything above ``to`` is discarded (the registry's
  rule); the trainer continues from ``to``.
- :func:`approve`: only a version AWAITING_APPROVAL (``[streams] ab_require_approval``).
- :func:`reject`: any published version but the primary, not already discarded.

Every event carries its operator as ``human:<name>``: the registry fold refuses a manual action without one
(:mod:`streamgrpo.lifecycle.writers`). Not covered: writing the event (the CLI does), races with the A/B controller (the fold applies events
in log order and ignores a promotion of a version discarded meanwhile).
"""

from __future__ import annotations

from streamgrpo.avro import provenance
from streamgrpo.avro import records as R
from streamgrpo.lifecycle.registry import Line, ancestors, status
from streamgrpo.models.errors import AdapterActionError

SERVICE = "adapters-cli"


def operator(name: str) -> str:
    """``ada`` or ``human:ada`` -> ``human:ada``."""
    who = provenance.human(name)
    if who is None:
        raise AdapterActionError("the operator's name is empty; pass --by NAME")
    return who


def _published(line: Line, version: int) -> None:
    if version not in line.announced:
        known = ", ".join(f"v{v}" for v in sorted(line.announced)) or "none"
        raise AdapterActionError(f"v{version} was never published (published: {known}); see `streamgrpo adapters list`")
    if version in line.discarded:
        raise AdapterActionError(f"v{version} is {status(line, version).value}: a discarded version never serves "
                                 "again; roll back to or promote another one")


def _reason(reason: str) -> str:
    if not reason.strip():
        raise AdapterActionError("a reason is required (--reason TEXT): it is kept in the version's history")
    return reason.strip()


def promote(line: Line, adapter: str, version: int, by: str, reason: str) -> R.AdapterPromoted:
    _published(line, version)
    if version == line.primary:
        raise AdapterActionError(f"v{version} is already the primary")
    if version < line.primary:
        raise AdapterActionError(f"v{version} is older than the primary v{line.primary}; to go back to it use "
                                 f"`streamgrpo adapters rollback {line.primary} --to {version}`")
    return R.AdapterPromoted(R.Envelope.new(SERVICE), adapter, version, line.primary, _reason(reason), {},
                             operator(by))


def rollback_target(line: Line, version: int | None, to: int | None) -> tuple[int, int]:
    """(the version rolled back, the version restored) with the defaults of the module docstring."""
    if version is None:
        version = line.canary if line.canary is not None else line.primary
    if version == 0:
        raise AdapterActionError("the base model (v0) cannot be rolled back" + (
            "; nothing has been published or promoted yet" if line.primary == 0 else ""))
    _published(line, version)
    if to is None:
        to = line.primary if version != line.primary else next(
            (a for a in ancestors(line, version) if a == 0 or (a in line.announced and a not in line.discarded)), 0)
    if to >= version:
        raise AdapterActionError(f"--to v{to} is not older than v{version}: a rollback restores an older version")
    if to and (to not in line.announced or to in line.discarded):
        raise AdapterActionError(f"cannot restore v{to}: it is {status(line, to).value if to in line.announced else 'unknown'}")
    return version, to


def rollback(line: Line, adapter: str, version: int | None, to: int | None, by: str,
             reason: str) -> R.AdapterRolledBack:
    v, restored = rollback_target(line, version, to)
    return R.AdapterRolledBack(R.Envelope.new(SERVICE), adapter, v, restored, _reason(reason), {}, operator(by))


def approve(line: Line, adapter: str, version: int, by: str, reason: str) -> R.AdapterApproved:
    _published(line, version)
    if version not in line.awaiting:
        hint = (" (approval is needed only with [streams] ab_require_approval = true, after the A/B test's verdict); "
                f"to promote it now use `streamgrpo adapters promote {version}`") if version > line.primary else ""
        raise AdapterActionError(f"v{version} is {status(line, version).value}, not AWAITING_APPROVAL{hint}")
    return R.AdapterApproved(R.Envelope.new(SERVICE), adapter, version, operator(by), _reason(reason))


def reject(line: Line, adapter: str, version: int, by: str, reason: str) -> R.AdapterRejected:
    _published(line, version)
    if version == line.primary:
        raise AdapterActionError(f"v{version} is the primary; use `streamgrpo adapters rollback {version}` instead")
    return R.AdapterRejected(R.Envelope.new(SERVICE), adapter, version, operator(by), _reason(reason))

"""Who may write a lifecycle action on ``adapter-events``, as the registry fold checks it (pure).

The trust boundary. ``adapter-events`` decides which adapter version serves every new group, and every service folds
it (:mod:`streamgrpo.lifecycle.registry`), so whoever can write it steers the loop. In production (k8s) Kafka ACLs
decide who may write it at all: ``k8s/components/kafka-acl`` (generated from the catalog's ``writers``:
trainer, streams, operator) lets no other principal produce there. The embedded broker of ``streamgrpo run`` has no
authentication, so anything that reaches it can write any event. There the fold applies the rule below itself, so
that a tool, a script or a test that writes a lifecycle action without saying who decided it changes nothing
(issue 38, finding 4: an ``AdapterRolledBack`` by any writer rolled the whole line back to v0). The same rule runs
in every reader (it is part of the one fold), so every service agrees on what was refused.

The rule, for ``AdapterPromoted``, ``AdapterRolledBack``, ``AdapterApproved`` and ``AdapterRejected`` (the manual
actions of :mod:`streamgrpo.lifecycle.actions`):

- written by the A/B controller (:data:`AB_CONTROLLER`) or the trainer (:data:`TRAINER`), as the envelope's
  ``producer.service`` says: its own automated decision; or
- carrying an operator identity: ``decided_by`` (``by`` for approvals and rejections) is ``human:<name>`` with a
  name, as ``streamgrpo adapters promote|rollback|approve|reject --by NAME`` writes it (default: the OS user).

Anything else is refused (the fold returns a ``Refused`` change, logs and counts it; the streams follower
dead-letters the record). What is not covered: the envelope and ``decided_by`` are written by the producer itself,
so this rule stops a writer that does not claim an identity, not one that forges one (a producer that calls itself
``ab-controller`` or signs as ``human:ada`` passes): only broker authentication and ACLs stop that, and the
embedded broker has none. ``AdapterVerdict`` (only the controller writes one; it parks or restarts a test and never
promotes or discards) and ``AdapterPublished`` (its lineage and facts are checked instead:
:mod:`streamgrpo.lifecycle.lineage_check`, :func:`streamgrpo.lifecycle.published.out_of_domain`) are not checked
for their writer.
"""

from __future__ import annotations

from typing import TypeAlias

from streamgrpo.avro import provenance
from streamgrpo.avro import records as R

#: ``producer.service`` of the A/B controller (``streams/ab_controller.py`` writes with it).
AB_CONTROLLER = "ab-controller"
#: ``producer.service`` of the trainer (``trainer/loop.py``'s ``SERVICE``).
TRAINER = "trainer"
#: Services whose lifecycle actions are their own automated decisions.
AUTOMATED = frozenset({AB_CONTROLLER, TRAINER})

Action: TypeAlias = R.AdapterPromoted | R.AdapterRolledBack | R.AdapterApproved | R.AdapterRejected
ACTIONS = (R.AdapterPromoted, R.AdapterRolledBack, R.AdapterApproved, R.AdapterRejected)


def decider(event: Action) -> str:
    """Who the event says decided it (``decided_by``, or ``by`` for approvals and rejections)."""
    return event.by if isinstance(event, R.AdapterApproved | R.AdapterRejected) else event.decided_by


def is_operator(who: str) -> bool:
    """Whether ``who`` is an operator identity: ``human:<name>`` with a name (as :func:`provenance.human` spells it)."""
    return provenance.is_human(who) and provenance.human(who) == who


def refusal(event: Action) -> str | None:
    """Why ``event`` may not act (see the module docstring), or None when it may."""
    producer = event.envelope.producer
    if producer.service in AUTOMATED or is_operator(decider(event)):
        return None
    return (f"{type(event).__name__} of v{event.version} written by {producer.service!r} ({producer.instance}) "
            f"without an operator identity (decider {decider(event)!r}): only the A/B controller and the trainer act "
            f"on their own; a manual action names its operator as human:<name> (`streamgrpo adapters ... --by NAME`)")

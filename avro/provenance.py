"""Who scored a Reward: the ONE home of the ``human:<name>`` provenance (pure, standard library only).

A Reward's ``judge.name`` is the judge's own name (``correct``, ``hybrid``, ...) or, for a person's reward
(``streamgrpo label``, an operator's action, MCP ``feedback``), ``human:<name>``. Every writer builds the name
with :func:`human`, every reader tests it with :func:`is_human` (Python) or :data:`JUDGE_SQL` (DuckDB over
the archive), so the spelling lives here only.

Not covered: who may claim a name (nothing authenticates a labeller).
"""

from __future__ import annotations

#: The prefix of a person's provenance: ``human:<name>``.
HUMAN_PREFIX = "human:"

#: SQL predicate on the rewards view (column ``judge.name``): a judge's reward, not a person's.
JUDGE_SQL = f"judge.name NOT LIKE '{HUMAN_PREFIX}%'"


def human(name: str) -> str | None:
    """``ada`` or ``human:ada`` -> ``human:ada``; None when the name is empty (the caller says what to pass)."""
    bare = name[len(HUMAN_PREFIX):] if name.startswith(HUMAN_PREFIX) else name
    return HUMAN_PREFIX + bare.strip() if bare.strip() else None


def is_human(judge_name: str) -> bool:
    """Whether ``judge_name`` is a person's provenance, not a judge's."""
    return judge_name.startswith(HUMAN_PREFIX)


def bare(name: str) -> str:
    """``human:ada`` -> ``ada`` (a judge's name is returned as it is)."""
    return name[len(HUMAN_PREFIX):] if is_human(name) else name

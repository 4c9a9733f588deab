"""Errors of the agent's tools.

A tool never raises on bad *input* (the planner's arguments): :meth:`Tool.run` turns a
:class:`ToolInputError` raised inside a tool into a :class:`~streamgrpo.rollout.tools.base.ToolResult`
with ``error`` set. The errors below that *do* reach callers are configuration mistakes made by
the operator (unknown tool name, unreadable corpus file), raised once at start.
"""

from __future__ import annotations

from streamgrpo.errors import ConfigError
from streamgrpo.rollout.errors import RolloutError


class ToolError(RolloutError):
    """Base of every tool error."""


class ToolInputError(ToolError):
    """The arguments of one call are unusable; becomes ``ToolResult.error`` (never escapes ``run``)."""


class ToolConfigError(ToolError, ConfigError):
    """A tool cannot be built from the settings (unknown name, missing dependency, bad corpus file). A
    :class:`~streamgrpo.errors.ConfigError`: permanent, so the service exits "misconfigured, do not restart"."""

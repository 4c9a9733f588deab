"""Errors of the python sandbox (all derive from :class:`~streamgrpo.rollout.errors.RolloutError`).

A jail that fails at call time is the call's error (the program never runs unjailed); the errors below
reach callers when the sandbox cannot be built or a call's cgroup cannot be made.
"""

from __future__ import annotations

from streamgrpo.errors import ConfigError
from streamgrpo.rollout.errors import RolloutError


class SandboxError(RolloutError):
    """Base of every sandbox error."""


class SandboxUnavailableError(SandboxError, ConfigError):
    """The python sandbox's isolation cannot be applied here; the message names what is missing and
    how to grant it. Raised when the tool is built (the worker refuses to start), never skipped. A
    :class:`~streamgrpo.errors.ConfigError`: permanent, so the service exits "misconfigured, do not restart"."""

"""Errors of the python sandbox (all derive from :class:`SandboxError`, a :class:`~streamgrpo.errors.StreamGRPOError`;
the sandbox is its own package and imports nothing of ``rollout``).

A jail that fails at call time is the call's error (the program never runs unjailed); the errors below
reach callers when the sandbox cannot be built or a call's cgroup cannot be made.
"""

from __future__ import annotations

from streamgrpo.errors import ConfigError, StreamGRPOError


class SandboxError(StreamGRPOError):
    """Base of every sandbox error."""


class SandboxUnavailableError(SandboxError, ConfigError):
    """The python sandbox's isolation cannot be applied here; the message names what is missing and
    how to grant it. Raised when the tool is built (the worker refuses to start), never skipped. A
    :class:`~streamgrpo.errors.ConfigError`: permanent, so the service exits "misconfigured, do not restart"."""

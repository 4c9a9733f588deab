"""Errors of ``streamgrpo replay``. All derive from :class:`StreamGRPOError`."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class ReplayError(StreamGRPOError):
    """A replay cannot run as asked (the message says what to change)."""

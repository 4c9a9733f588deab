"""Errors of the archive. All derive from :class:`StreamGRPOError`."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class ArchiveError(StreamGRPOError):
    """The Parquet archive cannot be read or written (the message says which path and why)."""

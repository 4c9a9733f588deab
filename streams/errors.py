"""Errors of the stream processors. All derive from :class:`StreamGRPOError`."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class StreamsError(StreamGRPOError):
    """Base class of stream-processor errors."""


class StreamsConfigError(StreamsError):
    """A streams setting is invalid (the message names the setting)."""


# The archive's error lives with the archive (streamgrpo.archive); re-exported for the archive agent.
from streamgrpo.archive.errors import ArchiveError  # noqa: E402

__all__ = ["ArchiveError", "StreamsConfigError", "StreamsError"]

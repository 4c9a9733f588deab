"""Root of the exception tree. Every package's ``errors.py`` derives from :class:`StreamGRPOError`.

Third-party errors are wrapped at the boundary with ``raise ... from exc`` so callers catch one
family. The message of every error says what to do about it.
"""

from __future__ import annotations


class StreamGRPOError(Exception):
    """Base class of every error raised by streamgrpo."""


class ConfigError(StreamGRPOError):
    """Configuration is invalid or incomplete; the message names the setting to fix."""


class MissingExtraError(StreamGRPOError):
    """An optional dependency group is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this command needs the optional module {module!r}; install it with "
            f"`pip install 'streamgrpo[{extra}]'` (or `make setup` in a checkout)"
        )

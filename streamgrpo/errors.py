"""Root of the exception tree. Every package's ``errors.py`` derives from :class:`StreamGRPOError`.

Third-party errors are wrapped at the boundary with ``raise ... from exc`` so callers catch one
family. The message of every error says what to do about it.
"""

from __future__ import annotations


class StreamGRPOError(Exception):
    """Base class of every error raised by streamgrpo."""


#: Exit status of a command that stopped on a :class:`ConfigError` (sysexits' EX_CONFIG): the configuration or
#: the host is missing something, so starting the process again cannot help. ``streamgrpo run`` does not
#: restart a child that exits with it; other failures exit 2 (a StreamGRPOError) or 1 and are restarted.
EXIT_MISCONFIGURED = 78


class ConfigError(StreamGRPOError):
    """Configuration is invalid or incomplete, or the host lacks what it asks for; the message names the
    setting to fix. Permanent: the CLI exits with :data:`EXIT_MISCONFIGURED`."""


class MissingExtraError(StreamGRPOError):
    """An optional dependency group is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this command needs the optional module {module!r}; install it with "
            f"`pip install 'streamgrpo[{extra}]'` (or `make setup` in a checkout)"
        )


class RunFailed(StreamGRPOError):
    """A `streamgrpo run` went to its end but failed a rule it is held to (it stalled: no group admitted or no
    rollout completed for ``[loop] liveness_s``); its report says why. The CLI exits 2."""

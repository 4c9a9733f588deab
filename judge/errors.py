"""Errors of the judge package (all derive from :class:`StreamGRPOError`)."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class JudgeError(StreamGRPOError):
    """Base class of judge errors."""


class UnknownJudgeError(JudgeError):
    """A judge name that is not in the registry; the message lists the known names."""


class ScoringError(JudgeError):
    """A scorer could not produce a score (e.g. its fallback needs a ground truth the task lacks)."""


class JudgeCallError(JudgeError):
    """The LLM endpoint failed (timeout, HTTP error, transport error) after all retries."""


class VerdictParseError(JudgeError):
    """The LLM's reply was neither valid verdict JSON nor repairable near-JSON."""

"""Errors of the trainer package (all derive from :class:`StreamGRPOError`)."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class TrainerError(StreamGRPOError):
    """Base of every trainer error."""


class ModelConfigError(TrainerError):
    """The requested model setup is impossible here (e.g. 4-bit QLoRA without CUDA)."""

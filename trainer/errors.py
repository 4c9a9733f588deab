"""Errors of the trainer package (all derive from :class:`StreamGRPOError`)."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class TrainerError(StreamGRPOError):
    """Base of every trainer error."""


class BaseModelError(TrainerError):
    """The base model cannot be found, converted or loaded; the message says what to install or pass."""


class ModelConfigError(TrainerError):
    """The requested model setup is impossible here (e.g. 4-bit QLoRA without CUDA)."""


class AdapterIntegrityError(TrainerError):
    """A stored adapter does not match its announced sha256, or files are missing."""


class AdapterStoreError(TrainerError):
    """The adapter store cannot be written or read (version exists, bad manifest...)."""


class BatchingError(TrainerError):
    """A TrainingSample cannot be turned into a training row (e.g. logprob/token count mismatch)."""

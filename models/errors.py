"""Errors of the shared model layer (base-model resolution, the adapter store)."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class ModelsError(StreamGRPOError):
    """Base of every error of :mod:`streamgrpo.models`."""


class BaseModelError(ModelsError):
    """The base model cannot be found, converted or loaded; the message says what to install or pass."""


class AdapterIntegrityError(ModelsError):
    """A stored adapter does not match its announced sha256, or files are missing."""


class AdapterStoreError(ModelsError):
    """The adapter store cannot be written or read (version exists, bad manifest...)."""


class AdapterActionError(ModelsError):
    """A lifecycle action (promote, roll back, approve, reject) is not possible in the registry's current state;
    the message says why and what to do instead."""

"""Errors of the shared model layer (base-model resolution, the adapter store)."""

from __future__ import annotations

from streamgrpo.errors import ConfigError, StreamGRPOError


class ModelsError(StreamGRPOError):
    """Base of every error of :mod:`streamgrpo.models`."""


class BaseModelError(ModelsError):
    """The base model cannot be found, converted or loaded; the message says what to install or pass."""


class AdapterIntegrityError(ModelsError):
    """A stored adapter does not match its announced sha256, or files are missing."""


class AdapterStoreError(ModelsError):
    """The adapter store cannot be written or read (version exists, bad manifest...)."""


class AdapterOutsideStoreError(AdapterStoreError):
    """An adapter path resolves outside the adapter store it must load from (``..``, a symlink, another store)."""


class AdapterActionError(ModelsError):
    """A lifecycle action (promote, roll back, approve, reject) is not possible in the registry's current state;
    the message says why and what to do instead."""


class AdapterStoreUnwritableError(AdapterStoreError, ConfigError):
    """The adapter store cannot take a new version (disk full, read-only, no permission): the host must be fixed,
    so it is a :class:`~streamgrpo.errors.ConfigError` (exit 78; ``streamgrpo run`` does not restart it)."""

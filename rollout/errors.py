"""Errors of the rollout package (all derive from :class:`StreamGRPOError`).

Every message says what to do about it. Third-party errors are wrapped at the boundary with
``raise ... from exc``. The policy backends' errors (:class:`~streamgrpo.inference.errors.PolicyError` and its
kinds, ``VLLMServerError``) live in :mod:`streamgrpo.inference.errors`.
"""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class RolloutError(StreamGRPOError):
    """Base of every rollout error."""


class AdapterRefusedError(RolloutError):
    """An announced adapter was refused (sha256 mismatch, missing files, unsupported uri)."""


class WorkerStopping(RolloutError):
    """The worker was asked to stop while a group waited for its adapter: the group emits nothing and its
    requests are not committed (they are delivered again to the next owner of their partition)."""

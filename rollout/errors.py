"""Errors of the rollout package (all derive from :class:`StreamGRPOError`).

Every message says what to do about it. Third-party errors (httpx, torch, peft) are wrapped at
the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class RolloutError(StreamGRPOError):
    """Base of every rollout error."""


class PolicyError(RolloutError):
    """A policy backend cannot generate (bad input, model not loadable, server failure)."""


class AdapterNotResidentError(PolicyError):
    """``generate`` was asked for an adapter version that is not loaded; it never serves another one."""


class AdapterLoadError(PolicyError):
    """An adapter could not be loaded into (or unloaded from) the policy backend."""


class AdapterInUseError(PolicyError):
    """An adapter version cannot be unloaded because in-flight work is pinned to it."""


class BackendUnavailableError(PolicyError):
    """A remote backend (vLLM / OpenAI-compatible server) did not answer correctly after retries."""


class AdapterRefusedError(RolloutError):
    """An announced adapter was refused (sha256 mismatch, missing files, unsupported uri)."""


class VLLMServerError(RolloutError):
    """A vLLM server this process starts could not be started, did not become ready, or died."""


class WorkerStopping(RolloutError):
    """The worker was asked to stop while a group waited for its adapter: the group emits nothing and its
    requests are not committed (they are delivered again to the next owner of their partition)."""

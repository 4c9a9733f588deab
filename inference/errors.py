"""Errors of the policy backends (all derive from :class:`InferenceError`, a :class:`StreamGRPOError`).

Every message says what to do about it. Third-party errors (httpx, torch, peft) are wrapped at the boundary
with ``raise ... from exc``. The agent (``rollout/``) catches :class:`PolicyError`; its own errors live in
:mod:`streamgrpo.rollout.errors`.
"""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class InferenceError(StreamGRPOError):
    """Base of every inference error."""


class PolicyError(InferenceError):
    """A policy backend cannot generate (bad input, model not loadable, server failure)."""


class AdapterNotResidentError(PolicyError):
    """``generate`` was asked for an adapter version that is not loaded; it never serves another one."""


class AdapterLoadError(PolicyError):
    """An adapter could not be loaded into (or unloaded from) the policy backend."""


class AdapterInUseError(PolicyError):
    """An adapter version cannot be unloaded because in-flight work is pinned to it."""


class BackendUnavailableError(PolicyError):
    """A remote backend (vLLM / OpenAI-compatible server) did not answer correctly after retries."""


class VLLMServerError(InferenceError):
    """A vLLM server this process starts could not be started, did not become ready, or died."""

"""The planner-policy interface shared by every backend (in-process transformers, vLLM over HTTP).

A :class:`PlannerPolicy` turns chat messages into prompt token ids and samples one continuation
per prompt, returning the sampled token ids and the *behaviour* logprob of each sampled token
(the log-probability under the temperature-scaled distribution over the full vocabulary, which is
what the trainer recomputes). Adapter versions are addressed explicitly on every call; a backend
never silently serves another version than the one asked for.

A :class:`TextModel` is the fixed (untrained) model used by the executor / verifier / synthesiser
roles: plain chat completion, no token ids, no logprobs.

What is covered: the interface and its invariants (documented per method).
What is not covered: any implementation (see ``local.py``, ``vllm.py``, ``openai_text.py``).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from streamgrpo.avro import records as R
from streamgrpo.inference.errors import AdapterInUseError
from streamgrpo.inference.residency import AdapterSlots
from streamgrpo.inference.stopping import JsonObjectEnd

if TYPE_CHECKING:
    from streamgrpo.inference.sampling import LogitsMask

#: Version number meaning "the base model, no adapter".
BASE_VERSION = 0


def served_name(adapter_name: str, version: int) -> str:
    """Immutable resident name of one adapter version (``"planner@v3"``)."""
    return f"{adapter_name}@v{version}"


@dataclass(frozen=True)
class Generation:
    """One sampled continuation.

    ``token_ids`` are the sampled tokens (EOS included if it was sampled); ``logprobs[i]`` is the
    behaviour logprob of ``token_ids[i]`` (``len(logprobs) == len(token_ids)``).
    ``adapter_version`` is the version that ACTUALLY served it (0 = base model). ``latency_ms`` is
    the wall time of the batched call that produced it (shared by the rows of one call).
    ``engine`` names the backend and the numerics of the logprobs (``"local/bfloat16"``; recorded as
    ``PlannerAction.engine``), None when the backend does not say.
    """

    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    logprobs: list[float]
    adapter_name: str
    adapter_version: int
    latency_ms: int
    engine: str | None = None


class PlannerPolicy(ABC):
    """A trainable planner policy with token-level logprobs and versioned LoRA adapters.

    Residency (shared by every backend): the newest ``keep_last`` versions of each adapter stay
    resident; older ones are evicted after a load or an unpin unless they are pinned by in-flight
    work (:meth:`pin` / :meth:`pinned`) or protected (:meth:`protect`, e.g. the primary version).
    """

    #: Whether :meth:`generate` applies a ``logits_mask`` (grammar-constrained decoding); backends that
    #: cannot raise :class:`~streamgrpo.inference.errors.PolicyError` when given one.
    applies_logits_mask: bool = False

    def __init__(self, keep_last: int = 4) -> None:
        self._slots = AdapterSlots(keep_last)

    # -- pinning (concrete; shared) -------------------------------------------------------------
    def pin(self, adapter_name: str, version: int) -> None:
        """Keep ``adapter_name@v{version}`` resident until :meth:`unpin`; raises
        :class:`~streamgrpo.inference.errors.AdapterNotResidentError` if it is not resident. 0 is a no-op."""
        self._slots.pin(adapter_name, version)

    def unpin(self, adapter_name: str, version: int) -> None:
        """Release one :meth:`pin`; evicts versions that only the pin kept resident."""
        self._slots.unpin(adapter_name, version)
        self._evict(adapter_name)

    @contextlib.contextmanager
    def pinned(self, adapter_name: str, version: int) -> Iterator[None]:
        """``with policy.pinned(name, v):`` run a whole trajectory/group on version ``v``."""
        self.pin(adapter_name, version)
        try:
            yield
        finally:
            self.unpin(adapter_name, version)

    def protect(self, adapter_name: str, versions: Iterable[int]) -> None:
        """Never evict ``versions`` (replaces the previous protected set), e.g. ``{primary}``."""
        self._slots.protect(adapter_name, versions)
        self._evict(adapter_name)

    def _evict(self, adapter_name: str) -> None:
        for version in self._slots.to_evict(adapter_name):
            try:
                self.unload_adapter(adapter_name, version)
            except AdapterInUseError:  # pinned between the decision and the unload: keep it
                continue

    @abstractmethod
    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` with the chat template applied and the generation prompt added."""

    @abstractmethod
    def generate(
        self,
        prompts: list[list[int]],
        sampling: R.SamplingParams,
        *,
        adapter_name: str,
        adapter_version: int,
        stop: JsonObjectEnd | None = None,
        logits_mask: LogitsMask | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Sample one continuation per prompt, in ONE batched call; ``prompts`` may repeat.

        ``stop``: end each continuation with the token that closes its JSON object (see
        :mod:`.stopping`); ``token_ids``, ``logprobs`` and ``text`` then stop there.
        ``logits_mask``: the per-row allowed-token hook of :mod:`.sampling` (only where
        :attr:`applies_logits_mask`); the logprobs are then those of the masked, renormalised distribution.
        ``seeds``: one seed per prompt, in place of ``sampling.seed`` (the rollout worker's per-trajectory
        seeds, :mod:`streamgrpo.rollout.seeding`); each backend says how far it honours them per row.

        Raises :class:`~streamgrpo.inference.errors.AdapterNotResidentError` if
        ``adapter_version`` (> 0) is not resident; version 0 is always the base model.
        """

    @abstractmethod
    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:
        """Make ``path`` resident under the immutable name ``f"{adapter_name}@v{version}"``."""

    @abstractmethod
    def unload_adapter(self, adapter_name: str, version: int) -> None:
        """Drop a resident version (no-op if absent)."""

    @abstractmethod
    def resident_versions(self, adapter_name: str) -> list[int]:
        """Resident versions of ``adapter_name``, ascending (never includes 0, which is always served)."""


@runtime_checkable
class TextModel(Protocol):
    """A fixed chat model for the executor / verifier / synthesiser roles."""

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> str:
        """Return the assistant reply to ``messages``."""
        ...

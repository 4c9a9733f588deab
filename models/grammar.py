"""The planner-action grammar: which tokens a planner reply may continue with, for sampling AND training.

A planner reply is ONE JSON object: ``{"tool": "<registered tool>", "input": "<non-empty text>"}``
(a tool call) or ``{"answer": "<non-empty text>"}``, written with the separators of the prompt's example
(``", "``, ``": "``), keys in that order, nothing before it and nothing after it but EOS.

Two versions of the language exist, and both stay readable so that an archived run replays:

- ``next-step/v2`` (the default): a tool call XOR an answer. An answer is only ever written AFTER the
  observation it depends on, never in the same object as the call that fetches it. Optionally the reply
  of turn ``answer_turn`` (the last allowed turn) and later is an answer: the planner is never left
  without one at the turn budget, so no fallback (e.g. "the last tool output") can become the policy.
- ``next-step/v1``: a tool call may carry an ``"answer"`` too, which the v1 parser read as the final answer
  (written before the tool's result was seen). Kept for replaying events sampled under it.

:class:`ActionGrammar` is that language for one set of registered tools (a JSON schema compiled by
``llguidance``, the grammar engine of vLLM's "guidance" backend and llama.cpp); every reply it admits
parses with :func:`streamgrpo.rollout.roles.planner.parse` as a valid action (the tool name is one of
the registered tools).

Its :attr:`ActionGrammar.descriptor` (``next-step/v2?tools=calculator,...&prefix=...&eos=2&answer_turn=4@<hash>``)
is what ``SamplingParams.constraint`` records: self-describing, so a trainer rebuilds the SAME grammar
from the event alone (the turn of each action decides whether the answer-only form applied), and hashed
(name, schema, prefix, EOS ids, answer turn), so a trainer whose code builds another grammar refuses the
sample instead of recomputing a different distribution.

:class:`TokenGrammar` compiles it against one tokenizer and vocabulary:
- :meth:`TokenGrammar.logits_mask` is the sampler's per-row hook (:mod:`streamgrpo.inference.sampling`):
  the allowed next tokens given the tokens the row sampled so far;
- :meth:`TokenGrammar.replay` recomputes, for a recorded action, the allowed-token bitmask before each
  of its tokens (the mask is a function of the token prefix only), for the trainer's recomputation.
Both walk the same ``llguidance`` matcher over the same tokens, so they give identical masks.

The forced response prefix (``'{"'``) is part of the prompt, not of the action: the matcher consumes
its tokens first. A tokenizer whose decoder is a Sequence holding ``ByteLevel`` (the GGUF-converted
SmolLM2) is handed to llguidance with the plain ``ByteLevel`` decoder, which it needs to see that
tokens are bytes (``Ġ`` = space).

What is covered: the tool/answer schema, sampling masks, exact replay, descriptor round trips.
What is not: a bound on the length of the strings (a reply cut by ``max_new_tokens`` inside its
string is repaired by the parser as before), tokenizers other than HF "fast" ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import torch

#: Name and version of the grammar; a change to the schema below needs a new version.
GRAMMAR_NAME = "next-step/v2"
#: The first version (a tool call may carry an answer), still read for replay.
GRAMMAR_V1 = "next-step/v1"
#: Separators of the prompt's example reply (``{"tool": "calculator", "input": "6*7"}``).
ITEM_SEPARATOR, KEY_SEPARATOR = ", ", ": "


@dataclass(frozen=True)
class ActionGrammar:
    """The planner's reply language for ``tools``; ``prefix``: text forced before the reply (in the prompt);
    ``eos``: the token ids that may end a reply after its object has closed."""

    tools: tuple[str, ...]
    prefix: str = ""
    eos: tuple[int, ...] = ()
    #: v1 only: a tool call may carry an answer too (see the module docstring).
    answer_in_call: bool = False
    #: From this turn on (1-based) the reply is an answer; 0 = never forced.
    answer_turn: int = 0

    def __post_init__(self) -> None:
        if any(not t or "," in t for t in self.tools):
            raise ValueError(f"tool names must be non-empty and free of commas: {list(self.tools)}")
        if self.answer_turn < 0:
            raise ValueError(f"answer_turn must be >= 0, got {self.answer_turn}")

    @property
    def name(self) -> str:
        return GRAMMAR_V1 if self.answer_in_call else GRAMMAR_NAME

    def answers_at(self, turn: int | None) -> bool:
        """Whether the reply of ``turn`` (1-based; None: unknown) must be an answer."""
        return bool(self.answer_turn) and turn is not None and turn >= self.answer_turn

    def schema(self, final: bool = False) -> dict[str, Any]:
        """The JSON schema of one reply (llguidance's ``x-guidance`` fixes the separators, no free whitespace);
        without tools, or ``final``, only an answer."""
        text = {"type": "string", "minLength": 1}
        answer = {"type": "object", "properties": {"answer": text}, "required": ["answer"],
                  "additionalProperties": False}
        props: dict[str, Any] = {"tool": {"enum": list(self.tools)}, "input": text}
        if self.answer_in_call:
            props["answer"] = text
        call = {"type": "object", "properties": props, "required": ["tool", "input"], "additionalProperties": False}
        return {
            "oneOf": [call, answer] if self.tools and not final else [answer],
            "x-guidance": {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR,
                           "key_separator": KEY_SEPARATOR},
        }

    @property
    def digest(self) -> str:
        """12 hex digits of sha256 over the name, the schema, the prefix, the EOS ids (and v2's answer turn)."""
        parts: list[Any] = [self.name, self.schema(), self.prefix, list(self.eos)]
        if not self.answer_in_call or self.answer_turn:  # a v1 grammar without it hashes as it always did
            parts.append(self.answer_turn)
        text = json.dumps(parts, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    @property
    def descriptor(self) -> str:
        """What ``SamplingParams.constraint`` records (see the module docstring)."""
        fields = {"tools": ",".join(self.tools), "prefix": self.prefix, "eos": ",".join(str(e) for e in self.eos)}
        if not self.answer_in_call or self.answer_turn:
            fields["answer_turn"] = str(self.answer_turn)
        query = urlencode(fields, quote_via=quote, safe=",")
        return f"{self.name}?{query}@{self.digest}"

    @classmethod
    def from_descriptor(cls, descriptor: str) -> ActionGrammar:
        """Rebuild the grammar a descriptor names; :class:`ValueError` if it is another grammar, malformed,
        or its hash is not the one this code computes (the grammar changed since it was sampled)."""
        body, _, digest = descriptor.rpartition("@")
        name, _, query = body.partition("?")
        if name not in (GRAMMAR_NAME, GRAMMAR_V1):
            raise ValueError(f"unknown grammar {name!r} (this code knows {GRAMMAR_NAME!r} and {GRAMMAR_V1!r})")
        fields = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        try:
            grammar = cls(tools=tuple(t for t in fields.get("tools", "").split(",") if t),
                          prefix=fields.get("prefix", ""),
                          eos=tuple(int(e) for e in fields.get("eos", "").split(",") if e),
                          answer_in_call=name == GRAMMAR_V1, answer_turn=int(fields.get("answer_turn") or 0))
        except ValueError as exc:
            raise ValueError(f"malformed grammar descriptor {descriptor!r}: {exc}") from exc
        if grammar.digest != digest:
            raise ValueError(f"grammar hash {digest!r} is not this code's {grammar.digest!r} for {body!r}")
        return grammar


def llguidance_tokenizer(tokenizer: Any, vocab_size: int, eos: Sequence[int]) -> Any:
    """An ``llguidance.LLTokenizer`` over a HF fast tokenizer's vocabulary (see the module docstring).

    Byte-level BPE / sentencepiece decoders go to llguidance as the tokenizer's JSON; a tokenizer whose
    decoder only joins token texts (``Fuse``, or none: character / word-level vocabularies) as the
    list of each token's UTF-8 text."""
    import llguidance

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"grammar-constrained decoding needs a HF fast tokenizer, got {type(tokenizer).__name__}")
    spec = json.loads(backend.to_str())
    decoder = spec.get("decoder") or {}
    if decoder.get("type") == "Sequence":
        byte_level = [d for d in decoder.get("decoders", []) if d.get("type") == "ByteLevel"]
        if byte_level:
            spec["decoder"] = byte_level[0]
    spec["padding"], spec["truncation"] = None, None
    source: Any = json.dumps(spec)
    if decoder.get("type") in (None, "Fuse"):
        source = llguidance.TokenizerWrapper(_TextTokens(tokenizer, vocab_size))
    try:
        return llguidance.LLTokenizer(source, n_vocab=vocab_size, eos_token=list(eos) or None)
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"llguidance cannot read this tokenizer: {exc}") from exc


class _TextTokens:
    """A vocabulary whose tokens ARE their text (what ``llguidance.TokenizerWrapper`` reads)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        special = set(tokenizer.all_special_ids)
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.tokens = [b"" if i in special or p is None else p.encode("utf-8") for i, p in enumerate(pieces)]
        self.tokens += [b""] * (vocab_size - len(self.tokens))
        self.special_token_ids = sorted(special)
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = tokenizer.bos_token_id

    def __call__(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))


def unpack(bits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``(..., W)`` int32 bitmask (bit ``i % 32`` of word ``i // 32`` = token ``i`` allowed) -> ``(..., V)`` bool."""
    shifts = torch.arange(32, dtype=torch.int32, device=bits.device)
    return ((bits.unsqueeze(-1) >> shifts) & 1).bool().flatten(-2)[..., :vocab_size]


class TokenGrammar:
    """An :class:`ActionGrammar` compiled against one tokenizer and a vocabulary of ``vocab_size`` tokens.
    Its answer-only form (the final turn of a v2 grammar) is compiled on first use."""

    def __init__(self, grammar: ActionGrammar, tokenizer: Any, vocab_size: int) -> None:
        self.grammar = grammar
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self._tokenizer = llguidance_tokenizer(tokenizer, vocab_size, grammar.eos)
        self._hf_tokenizer = tokenizer
        self._compiled: dict[bool, Any] = {}
        self._prefix_ids = list(tokenizer.encode(grammar.prefix, add_special_tokens=False)) if grammar.prefix else []
        self._variants: dict[int, TokenGrammar] = {grammar.answer_turn: self}
        self.matcher()  # fail at build time, not at the first sample

    @property
    def descriptor(self) -> str:
        return self.grammar.descriptor

    def with_answer_turn(self, answer_turn: int) -> TokenGrammar:
        """The same grammar with another answer turn (v2; 0 = never forced), sharing the compiled schemas."""
        variant = self._variants.get(answer_turn)
        if variant is None:
            variant = object.__new__(TokenGrammar)
            variant.__dict__.update(self.__dict__)
            variant.grammar = replace(self.grammar, answer_turn=answer_turn)
            self._variants[answer_turn] = variant
        return variant

    def _schema(self, final: bool) -> Any:
        import llguidance

        compiled = self._compiled.get(final)
        if compiled is None:
            compiled = llguidance.LLMatcher.grammar_from_json_schema(self.grammar.schema(final))
            self._compiled[final] = compiled
        return compiled

    def matcher(self, turn: int | None = None) -> Any:
        """A fresh matcher for the reply of ``turn`` that has consumed the forced prefix."""
        import llguidance

        matcher = llguidance.LLMatcher(self._tokenizer, self._schema(self.grammar.answers_at(turn)), log_level=0)
        if matcher.is_error():
            raise ValueError(f"invalid planner grammar: {matcher.get_error()}")
        if self._prefix_ids and not matcher.consume_tokens(self._prefix_ids):
            raise ValueError(f"the response prefix {self.grammar.prefix!r} does not start a planner reply: "
                             f"{matcher.get_error()}")
        return matcher

    def _bits(self, matcher: Any, out: torch.Tensor) -> None:
        """Fill ``out`` ((W,) int32, contiguous, CPU) with ``matcher``'s allowed next tokens."""
        matcher.unsafe_compute_mask_ptr(out.data_ptr(), out.numel() * out.element_size())
        if matcher.is_error():
            raise ValueError(f"planner grammar matcher failed: {matcher.get_error()}")

    def logits_mask(self, rows: int, turn: int | None = None) -> Any:
        """The sampler hook for one ``generate`` call of ``rows`` rows at ``turn``: ``mask(row, sampled) -> (V,)
        bool``. Each row walks its own matcher over the tokens it sampled (fed incrementally)."""
        matchers = [self.matcher(turn) for _ in range(rows)]
        fed = [0] * rows
        bits = torch.empty(self.words, dtype=torch.int32)

        def mask(row: int, sampled: Sequence[int]) -> torch.Tensor:
            new = list(sampled[fed[row]:])
            if new and not matchers[row].consume_tokens(new):
                raise ValueError(f"sampled tokens {new} violate the planner grammar: {matchers[row].get_error()}")
            fed[row] = len(sampled)
            self._bits(matchers[row], bits)
            return unpack(bits, self.vocab_size)

        return mask

    def replay(self, action_ids: Sequence[int], turn: int | None = None) -> torch.Tensor:
        """``(A, W)`` int32: the allowed-token bitmask before each of the ``A`` action tokens of the reply of
        ``turn``, exactly as sampled. :class:`ValueError` if a token was not allowed (the action was not
        sampled under it)."""
        matcher = self.matcher(turn)
        out = torch.empty((len(action_ids), self.words), dtype=torch.int32)
        for i, token in enumerate(action_ids):
            self._bits(matcher, out[i])
            if not (int(out[i, token // 32]) >> (token % 32)) & 1:
                raise ValueError(f"action token {i} (id {token}) is not allowed by {self.descriptor}")
            if i + 1 < len(action_ids) and not matcher.consume_token(int(token)):
                raise ValueError(f"action token {i} (id {token}) rejected: {matcher.get_error()}")
        return out


class GrammarReplay:
    """The trainer's ``replay(descriptor, action_ids, turn) -> (A, W)`` bitmasks (``trainer.batching.Replay``):
    each descriptor's grammar is rebuilt (:meth:`ActionGrammar.from_descriptor`, ValueError if unknown)
    and compiled once against the trainer's tokenizer."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._compiled: dict[str, TokenGrammar] = {}

    def grammar(self, descriptor: str) -> TokenGrammar:
        compiled = self._compiled.get(descriptor)
        if compiled is None:
            compiled = TokenGrammar(ActionGrammar.from_descriptor(descriptor), self.tokenizer, self.vocab_size)
            self._compiled[descriptor] = compiled
        return compiled

    def __call__(self, descriptor: str, action_ids: Sequence[int], turn: int | None = None) -> torch.Tensor:
        return self.grammar(descriptor).replay(action_ids, turn)

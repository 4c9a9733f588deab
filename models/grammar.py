"""The planner-action grammar: which tokens a planner reply may continue with, for sampling AND training.

A planner reply is ONE JSON object: ``{"tool": "<registered tool>", "input": "<non-empty text>"}``
(a tool call), ``{"answer": "<non-empty text>"}``, or a tool call followed by ``"answer": "<text>"``
(the parser reads any object with an answer as the final answer: the base SmolLM2 answers that way,
copying the prompt's example, in 3 of its 4 greedy answers on held-out tasks, and forbidding it took
its answered rate from 0.22 to 0), written with the separators of the prompt's example (``", "``,
``": "``), keys in that order, nothing before it and nothing after it but EOS. :class:`ActionGrammar` is that language
for one set of registered tools (a JSON schema compiled by ``llguidance``, the grammar engine of
vLLM's "guidance" backend and llama.cpp); every reply it admits parses with
:func:`streamgrpo.rollout.roles.planner.parse` as a valid action (the tool name is one of the
registered tools).

Its :attr:`ActionGrammar.descriptor` (``next-step/v1?tools=calculator,...&prefix=...&eos=2@<hash>``)
is what ``SamplingParams.constraint`` records: self-describing, so a trainer rebuilds the SAME grammar
from the event alone, and hashed (name, schema, prefix and EOS ids), so a trainer whose code builds
another grammar refuses the sample instead of recomputing a different distribution.

:class:`TokenGrammar` compiles it against one tokenizer and vocabulary:
- :meth:`TokenGrammar.logits_mask` is the sampler's per-row hook (:mod:`streamgrpo.rollout.policy.sampling`):
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
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import torch

#: Name and version of the grammar; a change to the schema below needs a new version.
GRAMMAR_NAME = "next-step/v1"
#: Separators of the prompt's example reply (``{"tool": "calculator", "input": "6*7"}``).
ITEM_SEPARATOR, KEY_SEPARATOR = ", ", ": "


@dataclass(frozen=True)
class ActionGrammar:
    """The planner's reply language for ``tools``; ``prefix``: text forced before the reply (in the prompt);
    ``eos``: the token ids that may end a reply after its object has closed."""

    tools: tuple[str, ...]
    prefix: str = ""
    eos: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if any(not t or "," in t for t in self.tools):
            raise ValueError(f"tool names must be non-empty and free of commas: {list(self.tools)}")

    def schema(self) -> dict[str, Any]:
        """The JSON schema of one reply (llguidance's ``x-guidance`` fixes the separators, no free whitespace);
        without tools only an answer."""
        text = {"type": "string", "minLength": 1}
        answer = {"type": "object", "properties": {"answer": text}, "required": ["answer"],
                  "additionalProperties": False}
        call = {"type": "object", "properties": {"tool": {"enum": list(self.tools)}, "input": text, "answer": text},
                "required": ["tool", "input"], "additionalProperties": False}
        return {
            "oneOf": [call, answer] if self.tools else [answer],
            "x-guidance": {"whitespace_flexible": False, "item_separator": ITEM_SEPARATOR,
                           "key_separator": KEY_SEPARATOR},
        }

    @property
    def digest(self) -> str:
        """12 hex digits of sha256 over the name, the schema, the prefix and the EOS ids."""
        text = json.dumps([GRAMMAR_NAME, self.schema(), self.prefix, list(self.eos)], sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    @property
    def descriptor(self) -> str:
        """What ``SamplingParams.constraint`` records (see the module docstring)."""
        query = urlencode({"tools": ",".join(self.tools), "prefix": self.prefix,
                           "eos": ",".join(str(e) for e in self.eos)}, quote_via=quote, safe=",")
        return f"{GRAMMAR_NAME}?{query}@{self.digest}"

    @classmethod
    def from_descriptor(cls, descriptor: str) -> ActionGrammar:
        """Rebuild the grammar a descriptor names; :class:`ValueError` if it is another grammar, malformed,
        or its hash is not the one this code computes (the grammar changed since it was sampled)."""
        body, _, digest = descriptor.rpartition("@")
        name, _, query = body.partition("?")
        if name != GRAMMAR_NAME:
            raise ValueError(f"unknown grammar {name!r} (this code knows {GRAMMAR_NAME!r})")
        fields = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        try:
            grammar = cls(tools=tuple(t for t in fields.get("tools", "").split(",") if t),
                          prefix=fields.get("prefix", ""),
                          eos=tuple(int(e) for e in fields.get("eos", "").split(",") if e))
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
    """An :class:`ActionGrammar` compiled against one tokenizer and a vocabulary of ``vocab_size`` tokens."""

    def __init__(self, grammar: ActionGrammar, tokenizer: Any, vocab_size: int) -> None:
        import llguidance

        self.grammar = grammar
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self._tokenizer = llguidance_tokenizer(tokenizer, vocab_size, grammar.eos)
        self._compiled = llguidance.LLMatcher.grammar_from_json_schema(grammar.schema())
        self._prefix_ids = list(tokenizer.encode(grammar.prefix, add_special_tokens=False)) if grammar.prefix else []
        self.matcher()  # fail at build time, not at the first sample

    @property
    def descriptor(self) -> str:
        return self.grammar.descriptor

    def matcher(self) -> Any:
        """A fresh matcher that has consumed the forced prefix."""
        import llguidance

        matcher = llguidance.LLMatcher(self._tokenizer, self._compiled, log_level=0)
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

    def logits_mask(self, rows: int) -> Any:
        """The sampler hook for one ``generate`` call of ``rows`` rows: ``mask(row, sampled) -> (V,) bool``.
        Each row walks its own matcher over the tokens it sampled (fed incrementally)."""
        matchers = [self.matcher() for _ in range(rows)]
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

    def replay(self, action_ids: Sequence[int]) -> torch.Tensor:
        """``(A, W)`` int32: the allowed-token bitmask before each of the ``A`` action tokens, exactly as
        sampled. :class:`ValueError` if a token was not allowed (the action was not sampled under it)."""
        matcher = self.matcher()
        out = torch.empty((len(action_ids), self.words), dtype=torch.int32)
        for i, token in enumerate(action_ids):
            self._bits(matcher, out[i])
            if not (int(out[i, token // 32]) >> (token % 32)) & 1:
                raise ValueError(f"action token {i} (id {token}) is not allowed by {self.descriptor}")
            if i + 1 < len(action_ids) and not matcher.consume_token(int(token)):
                raise ValueError(f"action token {i} (id {token}) rejected: {matcher.get_error()}")
        return out


class GrammarReplay:
    """The trainer's ``replay(descriptor, action_ids) -> (A, W)`` bitmasks (``trainer.batching.Replay``):
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

    def __call__(self, descriptor: str, action_ids: Sequence[int]) -> torch.Tensor:
        return self.grammar(descriptor).replay(action_ids)

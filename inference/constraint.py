"""The planner grammar handed to a policy, and the same grammar as a vLLM server applies it.

The rollout loop hands :meth:`~.base.PlannerPolicy.generate` a :class:`GrammarMask` as its ``logits_mask``:

- a policy that masks logits itself (:class:`~.local.LocalPolicy`) calls it like any
  :data:`~.sampling.LogitsMask` (``mask(row, sampled) -> (V,) bool``), row by row, from a
  :meth:`~streamgrpo.models.grammar.TokenGrammar.logits_mask` built on first use;
- a policy whose SERVER applies the grammar (:class:`~.vllm.VLLMPolicy`) reads what it names -- the
  compiled grammar and the turn -- and sends :func:`lark_grammar` as vLLM's ``structured_outputs.grammar``.

:func:`lark_grammar` writes the grammar of :class:`~streamgrpo.models.grammar.ActionGrammar` (a JSON schema
that llguidance compiles, with the response prefix already consumed from the prompt) as an llguidance Lark
grammar of what FOLLOWS the prefix: vLLM's structured-output matcher starts on the first generated token and
never sees the prompt, so the schema itself cannot be sent (it would demand a ``{`` the prompt already holds).
Each reply form (a call of each tool, the answer; v1's call with an answer too) becomes one alternative of
literal pieces -- the keys and separators exactly as the schema's ``x-guidance`` fixes them, the tool name as
its JSON string -- and string values written ``%json {<the schema's own string schema>}``, so llguidance's JSON
compiler builds the strings as it does for the schema. The prefix is then cut from the front of each
alternative (an alternative it does not start is dropped). Same llguidance, same language, same tokenizer
bytes: the token masks are the local ones. tests/unit/inference/test_constraint_lark.py walks both matchers
over thousands of tokens and compares every mask bit; tests/integration/test_vllm_grammar.py shows the server
applies it (forced tokens come back with logprob 0, the logprobs match the trainer's masked recomputation).

What is covered: v2 and v1, the answer-only last turn, any tool list, a prefix that ends inside the literal
head of a reply (``''``, ``'{'``, ``'{"'``, ``'{"tool": "calc'`` ...). What is not: a prefix that reaches into
a string value (:class:`ValueError`; the policy then samples without the grammar and says so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from streamgrpo.models.grammar import ActionGrammar, TokenGrammar

#: A piece of a reply form: ("lit", text) or ("str", the JSON schema of a string value).
Piece = tuple[str, Any]


class GrammarMask:
    """A :data:`~.sampling.LogitsMask` for one ``generate`` call of ``rows`` rows at ``turn`` that names the
    grammar it applies (:attr:`grammar`, :attr:`turn`), so a server-side backend can apply the same one."""

    def __init__(self, grammar: TokenGrammar, rows: int, turn: int | None) -> None:
        self.grammar = grammar
        self.rows = rows
        self.turn = turn
        self._mask: Any = None

    def __call__(self, row: int, sampled: Sequence[int]) -> torch.Tensor | None:
        if self._mask is None:  # built on first use: a server-side backend never walks the matchers
            self._mask = self.grammar.logits_mask(self.rows, self.turn)
        return self._mask(row, sampled)  # type: ignore[no-any-return]

    @property
    def descriptor(self) -> str:
        """What ``SamplingParams.constraint`` records for replies sampled under this mask."""
        return self.grammar.descriptor


def reply_forms(grammar: ActionGrammar, final: bool) -> list[list[Piece]]:
    """Every form a whole reply (prefix included) takes, as literal pieces and string values, read from
    ``grammar.schema(final)`` (the call and answer objects of its ``oneOf``, keys in schema order)."""
    from streamgrpo.models.grammar import ITEM_SEPARATOR, KEY_SEPARATOR

    schema = grammar.schema(final)
    forms: list[list[Piece]] = []
    for obj in schema["oneOf"]:
        props: dict[str, Any] = obj["properties"]
        required = list(obj["required"])
        optional = [k for k in props if k not in required]
        if required != list(props)[:len(required)] or len(optional) > 1:
            raise ValueError(f"reply object {obj} is not required keys then at most one optional key")
        for with_optional in ([False, True] if optional else [False]):
            keys = required + (optional if with_optional else [])
            for values in _key_values(props, keys):
                pieces: list[Piece] = []
                for i, (key, value) in enumerate(zip(keys, values, strict=True)):
                    pieces.append(("lit", ("{" if i == 0 else ITEM_SEPARATOR) + json.dumps(key) + KEY_SEPARATOR))
                    pieces.append(value)
                pieces.append(("lit", "}"))
                forms.append(_merged(pieces))
    return forms


def _key_values(props: dict[str, Any], keys: list[str]) -> list[list[Piece]]:
    """Each combination of values of ``keys``: an ``enum`` of strings is one literal per member."""
    combos: list[list[Piece]] = [[]]
    for key in keys:
        prop = props[key]
        if "enum" in prop:
            if not all(isinstance(v, str) for v in prop["enum"]):
                raise ValueError(f"enum of {key!r} holds a non-string: {prop['enum']}")
            options: list[Piece] = [("lit", json.dumps(v)) for v in prop["enum"]]
        elif prop.get("type") == "string":
            options = [("str", prop)]
        else:
            raise ValueError(f"property {key!r} is neither a string nor an enum of strings: {prop}")
        combos = [c + [o] for c in combos for o in options]
    return combos


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Adjacent literals joined."""
    out: list[Piece] = []
    for kind, value in pieces:
        if kind == "lit" and out and out[-1][0] == "lit":
            out[-1] = ("lit", out[-1][1] + value)
        elif kind != "lit" or value:
            out.append((kind, value))
    return out


def after_prefix(form: list[Piece], prefix: str) -> list[Piece] | None:
    """``form`` with ``prefix`` cut from its front; None when ``prefix`` does not start it. :class:`ValueError`
    when ``prefix`` reaches into a string value."""
    rest = list(form)
    while prefix:
        if not rest:
            return None
        kind, value = rest[0]
        if kind != "lit":
            raise ValueError(f"the response prefix reaches into a string value of the reply ({prefix!r} left); "
                             "vLLM's grammar cannot start there")
        if value.startswith(prefix):
            rest[0] = ("lit", value[len(prefix):])
            prefix = ""
        elif prefix.startswith(value):
            prefix = prefix[len(value):]
            rest.pop(0)
        else:
            return None
    return [p for p in rest if p != ("lit", "")]


def lark_grammar(grammar: ActionGrammar, turn: int | None = None) -> str:
    """The llguidance Lark grammar of what follows ``grammar.prefix`` in a reply of ``turn`` (module docstring).
    :class:`ValueError` when no reply form starts with the prefix, or the prefix reaches into a string."""
    forms = [after_prefix(f, grammar.prefix) for f in reply_forms(grammar, grammar.answers_at(turn))]
    kept = [f for f in forms if f]
    if not kept:
        raise ValueError(f"the response prefix {grammar.prefix!r} does not start a planner reply")
    strings: dict[str, str] = {}  # the JSON text of a string schema -> its rule name
    alternatives = []
    for form in kept:
        parts = []
        for kind, value in form:
            if kind == "lit":
                parts.append(json.dumps(value))
            else:
                text = json.dumps(dict(value, **{"x-guidance": {"whitespace_flexible": False}}), sort_keys=True)
                parts.append(strings.setdefault(text, f"string_{len(strings)}"))
        alternatives.append(" ".join(parts))
    lines = ["start: " + "\n     | ".join(alternatives)]
    lines += [f"{name}: %json {text}" for text, name in strings.items()]
    return "\n".join(lines) + "\n"

"""Stop a planner reply where its JSON object ends, instead of at EOS or ``max_new_tokens``.

A small model asked for ``{"tool": .., "input": ..}`` closes the object and then keeps writing
(explanations, a second object, chat markup) until ``max_new_tokens``: about half of every planner
call was spent on text the parser throws away. :class:`JsonObjectEnd` follows the text of a reply
character by character (braces, strings and escapes) and reports the first character at which
the object opened by the forced response prefix (``'{"'``) — or by the reply's first ``{`` when
there is no prefix — is closed.

The recorded action is the sampled tokens up to and including the token that closed the object;
their behaviour logprobs are unchanged by stopping (a stop string in vLLM works the same way), so the
trainer's recomputation over (prompt + action) tokens stays exact.

How each backend applies it:
- :class:`~.local.LocalPolicy` stops a row during sampling (it stops paying for the rest).
- :class:`~.vllm.VLLMPolicy` cuts the returned tokens at the same place, scanning the sampled token
  ids decoded one by one (never vLLM's ``text_offset``, which is wrong with token-id output); the
  server still generates the tail (a brace-balanced stop cannot be expressed as vLLM stop strings).

What is covered: nested objects and arrays, braces inside strings, escaped quotes. What is not:
single-quoted pseudo-JSON (a repaired reply that never closes runs to ``max_new_tokens`` as before).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JsonObjectEnd:
    """Stop rule: the reply ends where the JSON object begun by ``prefix`` (or by the reply) closes."""

    prefix: str = ""

    def scanner(self) -> JsonScanner:
        """A fresh per-row scanner, already fed with ``prefix``."""
        scanner = JsonScanner()
        scanner.feed(self.prefix)
        return scanner

    def end_of(self, text: str) -> int | None:
        """Length of the part of ``text`` (the reply after ``prefix``) that ends the object, or None."""
        return self.scanner().feed(text)


class JsonScanner:
    """Incremental brace/string scanner over a JSON-ish text."""

    __slots__ = ("closed", "depth", "escape", "in_string", "opened")

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.opened = False
        self.closed = False

    def feed(self, text: str) -> int | None:
        """Consume ``text``; return the number of its characters up to and including the one that
        closed the outermost object (None while it is still open, or once it had closed before)."""
        if self.closed:
            return None
        for index, char in enumerate(text):
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif char == "\\":
                    self.escape = True
                elif char == '"':
                    self.in_string = False
                continue
            if not self.opened:
                if char == "{":
                    self.opened, self.depth = True, 1
                continue  # text before the object (only possible without a prefix) is skipped
            if char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.closed = True
                    return index + 1
        return None


"""Agent roles: each module owns ONE prompt template (with ``PROMPT_HASH``, the first 12 hex digits of
its sha256, recorded in the events) and a registry of modes.

- :mod:`.planner`: the trained role: next step = one tool + input, or the answer;
- :mod:`.executor`: planner step -> concrete tool command -> tool run (``passthrough`` | ``model``);
- :mod:`.verifier`: stop / continue after each turn (``rule`` | ``model``);
- :mod:`.synthesiser`: the final answer (``passthrough`` | ``model``);
- :mod:`.analyser`: query analysis once per group, not trained (``rule`` | ``model``);
- :mod:`.types`: the typed structured outputs and :func:`~.types.prompt_hash`.
"""

"""The judge: reward functions (``scorers/``) and the service that turns rollouts into rewards.

- ``scorers/``: one module per judge (math, qa, llm, group_relative, hybrid) plus a dict registry.
- ``endpoint.py``: OpenAI-compatible chat calls with timeout, retries and backoff (llm judges).
- ``cache.py``: LRU (+ optional sqlite) cache of scores keyed by everything a scorer reads.
- ``decide.py``: the pure decision ``(task, rollout, scorer, cache) -> Reward | Reject``.
- ``service.py``: the Kafka shell (tasks + rollouts in, rewards + dead-letters out).
- ``cli.py``: ``streamgrpo judge``.
"""

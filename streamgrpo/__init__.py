"""streamgrpo: event-sourced GRPO training of a multi-agent LLM planner on Kafka.

The root package is deliberately tiny (CLI, config, errors, logging). The product lives in the
subpackages mapped from the repository's top-level folders: ``streamgrpo.avro`` (event contract),
``streamgrpo.topics`` (catalog, clients, producer SDK), ``streamgrpo.streams`` (Faust processors),
``streamgrpo.rollout``, ``streamgrpo.judge`` and ``streamgrpo.trainer``.
"""

__version__ = "0.1.0"

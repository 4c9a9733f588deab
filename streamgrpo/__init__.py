"""streamgrpo: event-sourced GRPO training of a multi-agent LLM planner on Kafka.

The root package is the FLOOR only: ``config`` (typed layered settings), ``errors`` (the root
exception), ``log`` (logging setup and secret redaction) and ``heartbeat`` (liveness file). Every
other package may import it; it imports none of them.

The product lives in the subpackages mapped from the repository's top-level folders:
``streamgrpo.avro`` (event contract), ``streamgrpo.topics`` (catalog, clients, plumbing, producer
SDK), ``streamgrpo.tasks`` (built-in tasks, task files), ``streamgrpo.models`` (base model, adapter
store), ``streamgrpo.streams`` (Faust processors), ``streamgrpo.rollout``, ``streamgrpo.judge``,
``streamgrpo.trainer``, and on top of them all ``streamgrpo.cli`` (the command line, ``run``,
progress and reports).
"""

__version__ = "0.1.0"

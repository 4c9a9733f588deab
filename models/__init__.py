"""Shared model layer, used by the trainer and the rollout workers alike.

- ``base``: resolve a base model name; converts the bundled SmolLM2 GGUF once into a cache (light import).
- ``numerics``: whether bf16 is fast on a device, the one rule sampler and trainer share.
- ``adapter_store``: immutable adapter versions on disk, sha256 over every file, verify before load; the one
  uri resolver, which confines a path to the store.
- ``grammar``: the planner-action grammar, for sampling and training alike.
- ``errors``: the errors of the layer.

Neither the trainer nor rollout reaches into the other: both import from here. The adapter lifecycle (the
registry fold, lineage checks, manual actions, ``AdapterState``, version statistics, the A/B decision) lives
in :mod:`streamgrpo.lifecycle`.
"""

"""Shared model layer, used by the trainer and the rollout workers alike.

- ``base``: resolve a base model name; converts the bundled SmolLM2 GGUF once into a cache (light import).
- ``numerics``: whether bf16 is fast on a device, the one rule sampler and trainer share.
- ``adapter_store``: immutable adapter versions on disk, sha256 over every file, verify before load; the one
  uri resolver, which confines a path to the store.
- ``grammar``: the planner-action grammar, for sampling and training alike.
- ``errors``: the errors of the layer.
- Until they move to :mod:`streamgrpo.lifecycle`: ``registry`` (the one fold of ``adapter-events``),
  ``lineage_check`` (whether an announcement follows its line), ``actions`` (manual lifecycle actions) and
  ``adapter_state`` (the registry fold and the version statistics joined into ``AdapterState``).

Neither the trainer nor rollout reaches into the other: both import from here. A version's statistics live in
:mod:`streamgrpo.lifecycle.stats`.
"""

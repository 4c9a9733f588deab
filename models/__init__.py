"""Shared model layer, used by the trainer and the rollout workers alike.

- ``base``: resolve a base model name; converts the bundled SmolLM2 GGUF once into a cache (light import).
- ``adapter_store``: immutable adapter versions on disk, sha256 over every file, verify before load.
- ``errors``: the errors of both.

Neither the trainer nor rollout reaches into the other: both import from here.
"""

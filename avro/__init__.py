"""The event contract: every fact of a run is one of these Avro events.

- ``schemas/``: one ``.avsc`` per named type (the contract; ``released/<version>/`` freezes each release);
- :mod:`.records`: frozen dataclasses mirroring the schemas, with explicit ``to_avro``/``from_avro``;
- :mod:`.ids`: the deterministic id of every derived event, group and rollout;
- :mod:`.codec`: events to bytes and back (Avro single-object encoding, or the Schema Registry wire format);
- :mod:`.registry` and :mod:`.compat`: schemas by name and fingerprint; compatibility with released versions.

Imports no Kafka client, torch or Faust: an upstream service can depend on it alone.
"""

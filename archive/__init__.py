"""The event archive: every topic as Parquet, the durable copy of the log (``streamgrpo.archive``).

- :mod:`.schema`: archive rows whose column types derive from the Avro contract (pure);
- :mod:`.store`: the writer (atomic files, partitioned by topic / event type / date, de-duplicated
  by event id) and the ordered reader used by ``replay``;
- :mod:`.duck`: DuckDB over an archive, one de-duplicated view per topic.
"""

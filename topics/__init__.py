"""The Kafka side: topics, producing, consuming, and the plumbing every service shares.

- :mod:`.catalog`: every topic (partitions, retention, key, event types); :mod:`.admin` creates and checks them;
- :mod:`.producer`: typed, size-bounded event producer; :mod:`.consumer`: the group consumer of the services
  (decode, dead-letter, explicit commits);
- :mod:`.follow`: the one "follow a log and fold it" reader, with a true caught-up signal, and the synchronous
  ``read_topic`` / ``iter_topic``;
- :mod:`.dead_letter`: the one bounded dead-letter builder and delivery that pauses instead of crash-looping;
  :mod:`.dedup`: the one bounded dedup set; :mod:`.received`: a consumed record and the decoding verdict;
- :mod:`.limits`: the size and count bounds; :mod:`.seams`: the Protocols services are typed against;
- :mod:`.broker`: the embedded Tansu broker; :mod:`.sdk`: the producer SDK for upstream services; :mod:`.cli`.

Imports no torch, transformers, vLLM or Faust.
"""

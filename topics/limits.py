"""Size and count bounds of what the project produces and accepts (the contract's limits, pure data).

Every producer of the project stays below :data:`MAX_RECORD_BYTES` (the default maximum message size
of Apache Kafka and of the clients is about 1 MB; a record above it fails with
``MSG_SIZE_TOO_LARGE`` and, where it is a consumer's output, would stop that consumer on every
restart). Consumers bound the fields that size their work at intake and dead-letter a record beyond
them instead of allocating for it: a Task's encoded size (its question is copied into every request
and completion of its group), a group's size, a rollout's planner turns.

What is not covered: topics configured with a smaller ``max.message.bytes`` than the default.
"""

from __future__ import annotations

#: Largest encoded record (value) any producer of the project sends: 1 MB minus room for the key,
#: headers and batch framing.
MAX_RECORD_BYTES = 900 * 1024
#: Largest encoded Task the fan-out accepts: its question is copied into every RolloutRequest and
#: RolloutCompleted of the group, next to the answer and the planner's prompts.
MAX_TASK_BYTES = 256 * 1024
#: Largest group (rollouts per task) accepted anywhere.
MAX_GROUP_SIZE = 1024
#: Hard safety limit of planner turns in one rollout: a request asking for more ends as ERROR, and the
#: advantage window rejects completions that claim more.
MAX_TURNS = 64
#: Bytes of a bad record's value (and of its key) copied into its DeadLetter; the rest is summarised
#: by the original's size and sha256.
DEAD_LETTER_VALUE_BYTES = 16 * 1024
DEAD_LETTER_KEY_BYTES = 1024
#: Characters of a reason or error text carried by an event (a dead letter's reason, a Reward's error).
MAX_REASON_CHARS = 2000
DEAD_LETTER_REASON_CHARS = MAX_REASON_CHARS

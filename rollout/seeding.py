"""Per-draw sampling seeds of the rollout worker (``[rollout] sampling_seed``; pure, no I/O).

With ``sampling_seed`` set, every sampled model call of a rollout draws from its own seed, a stable hash
(:func:`~streamgrpo.avro.ids.derived_seed`: blake2b, never Python's salted ``hash()``) of: the run's
``sampling_seed``; the task the request belongs to -- its ``source`` and ``question`` and its ``attempt``
(the curriculum's group count of that task); the sample's ``rollout_index`` in the group; the turn; and the
role that samples. The local engines give each row of a batched call its own generator seeded with it
(:func:`~streamgrpo.inference.sampling.row_generators`),
so a sample's draws do not depend on which other trajectories or groups share its call.

Why the task's content and not its ``task_id``/``group_id``: ``streamgrpo run`` submits tasks under random
(uuid4) task ids, so ids differ between two runs of the same tasks; keyed on the content, two runs with the
same ``sampling_seed`` draw the same numbers for the same task, attempt, sample, turn and role -- the
common random numbers a paired comparison of two settings needs. The same request therefore gives the same
trajectory under the same adapter version (up to the last float bits of batched logits, which move a draw
only when its uniform lands within ~1e-7 of a token's CDF boundary). Not covered: two distinct tasks with
the same source, question and attempt in one run draw alike; the vLLM backend takes one seed per HTTP
request (see :mod:`streamgrpo.inference.vllm`). The roles other than the planner decode greedily
(temperature 0), so they draw nothing.
"""

from __future__ import annotations

from streamgrpo.avro import ids
from streamgrpo.avro import records as R


def draw_seed(sampling_seed: int, request: R.RolloutRequest, turn: int, role: str) -> int:
    """The seed of ``role``'s call at ``turn`` of ``request``'s trajectory (see module docstring)."""
    parts = (sampling_seed, request.source, request.question, ids.attempt_of(request.metadata),
             request.rollout_index, turn, role)
    key = "\x1f".join(str(part) for part in parts)
    return ids.derived_seed(key)

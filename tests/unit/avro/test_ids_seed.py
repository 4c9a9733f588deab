"""``ids.derived_seed``: the one stable 63-bit hash behind the rollout worker's per-draw sampling seeds and the vLLM
backend's per-request seed. Stable means: the same in every process (not Python's salted ``hash()``) and the same
across releases -- two runs with the same ``[rollout] sampling_seed`` are paired only while the seeds they draw
do not move, so the values below are pinned (computed with the two callers' own hashes before they shared this
one); changing the hash or a caller's key format must fail here."""

from __future__ import annotations

import os
import subprocess
import sys

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.inference.vllm import request_seed
from streamgrpo.rollout.seeding import draw_seed


def _request() -> R.RolloutRequest:
    return R.RolloutRequest(
        envelope=R.Envelope.new("test", task_id="t", group_id="t-g", rollout_id="t-r3"), question="What is 6*7?",
        source="test", rollout_index=3, group_size=4, adapter_name="planner", adapter_version=0, max_turns=2,
        sampling=R.SamplingParams(temperature=2.0, top_p=1.0, max_new_tokens=24), metadata={"attempt": "2"})


def test_seeds_are_non_negative_63_bit_and_differ_by_key() -> None:
    seeds = [ids.derived_seed(f"key-{i}") for i in range(2000)]
    assert all(0 <= s < 2**ids.SEED_BITS for s in seeds)
    assert len(set(seeds)) == len(seeds)
    assert max(seeds) > 2**62, "the whole 63-bit range is used, not a narrow slice of it"


def test_the_same_key_gives_the_same_seed_in_another_process_with_another_hash_salt() -> None:
    code = "from streamgrpo.avro import ids; print(ids.derived_seed('5\\x1fbuiltin\\x1fWhat is 6*7?'))"
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": salt}).stdout.strip() for salt in ("1", "2")}
    assert out == {str(ids.derived_seed("5\x1fbuiltin\x1fWhat is 6*7?"))}


def test_both_callers_draw_the_seeds_they_drew_before_sharing_the_hash() -> None:
    assert request_seed([11, 12, 13, 14]) == 6820038327835890698
    assert draw_seed(5, _request(), 1, "planner") == 7820529333389562942
    assert request_seed([11, 12, 13, 14]) != request_seed([14, 13, 12, 11]), "a request's rows count in order"

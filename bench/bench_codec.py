"""Codec benchmark: Avro single-object encoding vs a JSON baseline, same events, same run.

The event is a PlannerAction with 512 prompt tokens and 128 action tokens (+ behaviour logprobs),
converted from the dataclass to bytes and back (what producers and consumers really do).
Prints one JSON line.
"""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import datetime

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec


def planner_action(seed: int = 0) -> R.PlannerAction:
    rng = random.Random(seed)
    return R.PlannerAction(
        envelope=R.Envelope.new("bench", task_id="t", group_id="g", rollout_id="r", turn=1),
        prompt_token_ids=[rng.randrange(49152) for _ in range(512)],
        action_text='{"tool": "calculator", "input": "347 * 29"}' * 3,
        action_token_ids=[rng.randrange(49152) for _ in range(128)],
        behaviour_logprobs=[-rng.random() * 5 for _ in range(128)],
        adapter_name="planner", adapter_version=7,
        sampling=R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=128),
        parse_status=R.ParseStatus.STRICT, prompt_hash="0123456789ab", latency_ms=250, tool="calculator",
    )


def _json_default(v: object) -> object:
    if isinstance(v, datetime):
        return v.isoformat()
    raise TypeError(type(v))


def _json_encode(e: R.PlannerAction) -> bytes:
    return json.dumps(e.to_avro(), default=_json_default, separators=(",", ":")).encode()


def _json_decode(b: bytes) -> R.PlannerAction:
    d = json.loads(b)
    d["envelope"]["event_time"] = datetime.fromisoformat(d["envelope"]["event_time"])
    return R.PlannerAction.from_avro(d)


def _rate(fn, items, repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        for x in items:
            fn(x)
        best = max(best, len(items) / (time.perf_counter() - t))
    return best


def main(n: int = 2000) -> dict[str, object]:
    events = [planner_action(i) for i in range(n)]
    codec = Codec()
    avro_bytes = [codec.encode(e) for e in events]
    json_bytes = [_json_encode(e) for e in events]
    a, j = codec.decode(avro_bytes[0]), _json_decode(json_bytes[0])
    # Avro stores logprobs as float32 (4 bytes; |error| < 1e-6 at these magnitudes), JSON as decimal text.
    assert a.prompt_token_ids == j.prompt_token_ids and a.action_token_ids == j.action_token_ids
    assert max(abs(x - y) for x, y in zip(a.behaviour_logprobs, j.behaviour_logprobs, strict=True)) < 1e-6
    result = {
        "bench": "codec",
        "event": "PlannerAction(512 prompt + 128 action tokens + 128 logprobs)",
        "n": n,
        "avro_bytes_per_event": sum(map(len, avro_bytes)) / n,
        "json_bytes_per_event": sum(map(len, json_bytes)) / n,
        "avro_encode_per_s": _rate(codec.encode, events, 3),
        "json_encode_per_s": _rate(_json_encode, events, 3),
        "avro_decode_per_s": _rate(codec.decode, avro_bytes, 3),
        "json_decode_per_s": _rate(_json_decode, json_bytes, 3),
    }
    result["avro_roundtrip_per_s"] = 1 / (1 / result["avro_encode_per_s"] + 1 / result["avro_decode_per_s"])
    result["json_roundtrip_per_s"] = 1 / (1 / result["json_encode_per_s"] + 1 / result["json_decode_per_s"])
    return result


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)))

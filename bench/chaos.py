"""Chaos campaign of RELIABILITY.md: ``streamgrpo run`` of the tiny planner on the embedded broker while a
random service child (streams, judge, rollout worker, trainer) is SIGKILLed or SIGTERMed every few seconds,
and, with ``--broker-restarts N``, the broker killed N times and brought back with its log and committed offsets
as a durable broker would restart (tests/support/broker_restart.py), then an audit of the topics (rules in
tests/support/chaos.py). Prints one JSON object per run (kills by service and signal, each SIGTERM's time to exit
and the ``hung`` ones, restarts, the broker restarts, the audit; ``lost`` and ``hung`` are the figures that must
be 0 / empty).

Usage: python bench/chaos.py [--chaos-s 180] [--drain-s 90] [--interval 4 8] [--seed 0] [--runs 1]
       [--tasks 800] [--group-size 4] [--group-timeout-s 60] [--min-uptime-s 15] [--warmup-s 30]
       [--signals KILL TERM] [--term-grace-s 15] [--broker-restarts 0] [--outage-s 10] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from pathlib import Path

import _paths  # noqa: F401 - tests/ on sys.path for support.*
from support.chaos import run_chaos
from support.tiny_planner import build_tiny_planner

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chaos-s", type=float, default=180.0, help="seconds of kills")
    ap.add_argument("--drain-s", type=float, default=90.0, help="seconds without kills before the run stops")
    ap.add_argument("--interval", type=float, nargs=2, default=(4.0, 8.0), help="seconds between kills (uniform)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=1, help="runs, seeds seed..seed+runs-1")
    ap.add_argument("--tasks", type=int, default=800, help="tasks submitted (enough to keep the loop busy)")
    ap.add_argument("--min-uptime-s", type=float, default=15.0, help="a child is killed only after this long alive")
    ap.add_argument("--warmup-s", type=float, default=30.0, help="no kill in the first seconds")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--group-timeout-s", type=float, default=60.0)
    ap.add_argument("--signals", nargs="+", choices=("KILL", "TERM"), default=["KILL", "TERM"],
                    help="signals drawn per kill (SIGKILL: a machine death; SIGTERM: a rolling update)")
    ap.add_argument("--term-grace-s", type=float, default=15.0,
                    help="a SIGTERMed service must exit within this; one that does not is reported hung and SIGKILLed")
    ap.add_argument("--broker-restarts", type=int, default=0,
                    help="times the broker is SIGKILLed and brought back with its log, evenly over the kill window")
    ap.add_argument("--outage-s", type=float, default=10.0, help="seconds the loop runs without its broker each time")
    ap.add_argument("--forge", action="store_true",
                    help="also write forged lifecycle events and NaN / out-of-range human rewards during the kills "
                    "(each must become one dead letter; support.chaos.FORGERIES)")
    ap.add_argument("--liveness-s", type=float, default=None,
                    help="[loop] liveness_s of the run (a stall longer than this fails it: exit 2)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs of every child)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = Path(tempfile.mkdtemp(prefix="streamgrpo-chaos-"))
    base = work / "tiny-planner"
    build_tiny_planner(base)
    with EmbeddedBroker(work / "broker") as broker:
        for i in range(args.runs):
            kafka = KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000,
                                  topic_prefix=f"chaos{uuid.uuid4().hex[:8]}.")
            ensure(kafka)
            result = run_chaos(kafka, base, work / f"run{i}", chaos_s=args.chaos_s, drain_s=args.drain_s,
                               interval_s=tuple(args.interval), seed=args.seed + i,
                               group_timeout_s=args.group_timeout_s, tasks=args.tasks, group_size=args.group_size,
                               min_uptime_s=args.min_uptime_s, warmup_s=args.warmup_s,
                               signals=tuple(args.signals), term_grace_s=args.term_grace_s, broker=broker,
                               broker_restarts=args.broker_restarts, outage_s=args.outage_s, forge=args.forge,
                               liveness_s=args.liveness_s)
            result.pop("output_tail")
            print(json.dumps({"run": i, "work": str(work / f"run{i}"), **result}), flush=True)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Liveness/readiness probe of streamgrpo's Kafka workers (installed as ``streamgrpo-probe``).

The workers (streams, judge, rollout, trainer) serve no HTTP, so their probes are exec probes:

- ``streamgrpo-probe ready``: the settings file parses and a TCP connection to at least one
  Kafka bootstrap address succeeds within ``--timeout`` seconds. The bootstrap comes from
  ``STREAMGRPO_KAFKA__BOOTSTRAP`` / ``STREAMGRPO_BOOTSTRAP`` or ``[kafka] bootstrap`` of the TOML
  file named by ``STREAMGRPO_CONFIG`` (the same precedence as the application).
- ``streamgrpo-probe live --max-age S``: the heartbeat file named by
  ``STREAMGRPO_HEARTBEAT_FILE`` was touched in the last ``S`` seconds. A worker whose poll loop
  hangs stops touching it and is restarted.

The workers beat the file from their main loop (``streamgrpo.heartbeat``): once per poll and
once per finished group / training step; a streams worker beats from a Faust timer every 5 s.

The CLI beats once as it starts, before any model is loaded, so a worker that hangs while starting
goes stale as well. What is not covered: ``live`` passes while the file does not exist yet (the
seconds before the interpreter reaches the CLI).
``ready`` proves the broker port accepts connections, not that the consumer group is assigned.

Standard library only (it runs every few seconds: no heavy imports). Exit 0 = healthy, 1 = not.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import tomllib


def settings(environ: Mapping[str, str]) -> dict:
    """The parsed TOML settings file, or {} when none is configured."""
    path = environ.get("STREAMGRPO_CONFIG")
    if not path:
        return {}
    return tomllib.loads(Path(path).read_text())


def bootstrap(environ: Mapping[str, str], toml: dict) -> list[tuple[str, int]]:
    """Kafka (host, port) pairs with the application's precedence: env over TOML."""
    raw = environ.get("STREAMGRPO_KAFKA__BOOTSTRAP") or environ.get("STREAMGRPO_BOOTSTRAP") \
        or (toml.get("kafka") or {}).get("bootstrap") or ""
    out = []
    for item in str(raw).split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


def ready(environ: Mapping[str, str], timeout: float) -> tuple[bool, str]:
    try:
        toml = settings(environ)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return False, f"settings file unreadable: {exc}"
    addrs = bootstrap(environ, toml)
    if not addrs:
        return False, "no Kafka bootstrap configured ([kafka] bootstrap or STREAMGRPO_KAFKA__BOOTSTRAP)"
    errors = []
    for host, port in addrs:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True, f"kafka reachable at {host}:{port}"
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc}")
    return False, "kafka unreachable: " + "; ".join(errors)


def live(environ: Mapping[str, str], max_age: float, now: float | None = None) -> tuple[bool, str]:
    try:
        settings(environ)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return False, f"settings file unreadable: {exc}"
    beat = environ.get("STREAMGRPO_HEARTBEAT_FILE")
    if not beat or not os.path.exists(beat):
        return True, "no heartbeat file yet"
    age = (time.time() if now is None else now) - os.path.getmtime(beat)
    if age > max_age:
        return False, f"heartbeat {beat} is {age:.0f}s old (> {max_age:.0f}s): the worker loop is stuck"
    return True, f"heartbeat {age:.0f}s old"


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamgrpo-probe", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("ready", help="settings parse and Kafka accepts TCP connections")
    r.add_argument("--timeout", type=float, default=3.0, help="seconds per connection attempt")
    lv = sub.add_parser("live", help="the heartbeat file is fresh")
    lv.add_argument("--max-age", type=float, default=300.0, help="oldest acceptable heartbeat, seconds")
    args = parser.parse_args(argv)
    env = os.environ if environ is None else environ
    ok, why = ready(env, args.timeout) if args.mode == "ready" else live(env, args.max_age)
    print(why, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The vLLM server of ``streamgrpo run --policy vllm``, from the ``[rollout]`` settings: the launcher run starts as a
child (``python -m streamgrpo.rollout.vllm_serve``: execs the server :mod:`streamgrpo.inference.vllm_server`
describes) and run's wait for it to serve. The agent reads ``[rollout]``; the inference layer below it only
takes what it is given (:class:`~streamgrpo.inference.vllm_server.ServerSettings`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from streamgrpo.inference.vllm_server import resolved_command, served_model_name, wait_ready
from streamgrpo.rollout.config import RolloutConfig


def wait_for_run(environ: Mapping[str, str], *, alive: Callable[[], bool], log_path: Path | None,
                 echo: Callable[[str], None], every_s: float = 15.0) -> float:
    """``streamgrpo run``'s wait for the server it started (settings read with ``environ``, as the server
    child reads them), with a progress line every ``every_s``. Returns the seconds it took."""
    from streamgrpo.config import load

    cfg = load(RolloutConfig, "rollout", environ=environ)
    echo(f"vLLM server starting at {cfg.vllm_url} (dtype {cfg.vllm_dtype}, log {log_path}); "
         "loading takes 1-3 min on a CPU")
    shown = [0.0]

    def progress(elapsed: float, reason: str) -> None:
        if elapsed - shown[0] >= every_s:
            shown[0] = elapsed
            echo(f"  vLLM server still loading after {elapsed:.0f} s ({reason[:80]})")

    key = cfg.vllm_api_key.get_secret_value() if cfg.vllm_api_key is not None else None
    took = wait_ready(cfg.vllm_url, served_model_name(cfg), timeout_s=cfg.vllm_start_timeout_s, alive=alive,
                      log_path=log_path, api_key=key, on_wait=progress)
    echo(f"vLLM server ready after {took:.0f} s")
    return took


def main() -> None:
    """``python -m streamgrpo.rollout.vllm_serve``: exec the server described by the ``[rollout]`` settings."""
    from streamgrpo.config import load
    from streamgrpo.errors import StreamGRPOError
    from streamgrpo.supervisor import die_with_supervisor

    die_with_supervisor()  # started by `run`: the server dies with it (the signal survives the exec below)
    try:
        argv, env = resolved_command(load(RolloutConfig, "rollout"), os.environ)
    except StreamGRPOError as exc:  # a supervised child: say why on stderr (its log) and exit non-zero
        print(f"cannot start the vLLM server: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    print("starting vLLM:", " ".join(argv), flush=True)
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()

"""`run` writes the merged config its services read: nested tables must survive (a user's
``[judge] routes``, ``[judge.hybrid]`` or ``[[rollout.tools.mcp_servers]]`` used to reach the services as the
text of a Python dict, which every service refused at start)."""

from __future__ import annotations

import tomllib

from streamgrpo.cli.run import to_toml


def test_nested_tables_and_arrays_of_tables_round_trip() -> None:
    data = {
        "judge": {"default_judge": "hybrid", "routes": {"builtin": "hybrid", "my source": "math"},
                  "hybrid": {"format_weight": 0.0, "correctness": "auto"}},
        "rollout": {"tools": {"enabled": ["calculator"], "mcp_servers": [
            {"name": "fx", "command": ["python", "-m", "srv"], "timeout_s": 5.0},
            {"name": "web", "url": "http://127.0.0.1:8765/mcp"}]}, "answer_at_last_turn": True},
        "loop": {"max_turns": 3, "adapter_name": "planner"},
    }
    assert tomllib.loads(to_toml(data)) == data

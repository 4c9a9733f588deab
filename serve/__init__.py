"""``streamgrpo serve``: the trained agent as an MCP server whose calls land in the log.

:mod:`.agent` runs one trajectory per ``solve`` through the rollout worker's own group runner (version
gating, adapter pinning, event emission) and records every call as a Task plus the rollout events;
:mod:`.server` exposes it with the ``mcp`` package's MCPServer over stdio or streamable HTTP (bearer-token
authentication on HTTP); :mod:`.discovery` finds the run, broker and adapter store to serve from (or none);
:mod:`.bounds` and :mod:`.config` (``[serve]``) bound every call; :mod:`.tokens` signs the feedback tokens (a key
of the home: they survive a restart).
"""

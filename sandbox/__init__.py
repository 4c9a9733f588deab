"""The python tool's process boundary: LLM-written code runs here, never in the worker's process.

- :mod:`.runner`: one call (plan and verify the jail once, then spawn, bound and read each run);
- :mod:`.jail`: the bubblewrap jail (namespaces, read-only root, tmpfs, uid) and its start-up probe;
- :mod:`.seccomp`: the deny-list filter; :mod:`._sandbox_child`: the bootstrap that runs inside the jail
  (rlimits, the audit hook, then the program);
- :mod:`.sandbox_io`: bounded reads, the jail's pid, the tmpfs file watch; :mod:`.sandbox_cgroup`: a cgroup
  per call where one is delegated; :mod:`.sandbox_limits`: which limits hold for the whole call, said at start;
- :mod:`.server_jail`: the jail of the stdio MCP servers a worker starts (no view of the worker's secrets);
- :mod:`.config`: ``[rollout.tools.sandbox]`` settings; :mod:`.errors`: what reaches callers.

The agent's ``python`` tool (:mod:`streamgrpo.rollout.tools.python_sandbox`) is built on :mod:`.runner`.
Importing this package imports nothing.
"""

"""Feedback tokens of ``streamgrpo serve``: stateless, signed by a server secret kept in the home, so that they survive
a restart of ``serve``.

``solve`` hands its client a ``feedback_token`` with the answer; ``feedback`` is accepted only with it. A token is
``v1.<payload>.<mac>``: the payload (base64url JSON) holds what the human Reward of that answer needs -- the served
Task's id (the group and rollout ids derive from it, as :func:`~streamgrpo.serve.agent.served_request` derives them),
the adapter and version that answered, its turns, status and tool calls -- and the mac is HMAC-SHA256, under the
server secret, of the scope (the topic prefix the call was recorded under), the client the answer was served to (its
MCP client name) and the payload. So a token is valid only for that rollout, that client and that run's topics; a
training rollout never gets one (only ``solve`` issues them); a restarted ``serve`` on the same home accepts the
tokens it gave before, with no state kept per call and nothing read back from the broker.

The secret (:func:`load_or_create_key`): 32 random bytes, hex, in ``<home>/serve/feedback.key``, created once (mode
0600 in a 0700 directory, written to a temporary file and linked into place, so a second ``serve`` starting at the
same time reads the one that won), then only read; a key file that is not a regular file owned by this user, that
others may read or write, or that does not hold a key is a :class:`~streamgrpo.errors.ConfigError` naming the file.
The secret is never logged, never in an event or a reply, and registered for redaction (:mod:`streamgrpo.redact`).
Rotation: delete the file while no ``serve`` runs; every token given before stops working.

What is not covered: revoking one token (they do not expire; rotate the key); a client that shares its token and
its client name with another (the token is the secret of one reply); serve processes on different homes (each has
its own key: a token is accepted where it was issued, or on a ``serve`` sharing that home) -- so a home on
ephemeral storage (the k8s ``mcp`` pod's home lies in its ``/tmp`` emptyDir) loses the key with the pod, and
replicas with their own homes do not accept each other's tokens; a home ``serve`` cannot write (it warns, and signs
with a key of its process only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.errors import ConfigError

#: The key file under the home.
KEY_FILE = Path("serve") / "feedback.key"
KEY_BYTES = 32
VERSION = "v1"
#: Longest token ``feedback`` reads (the payload grows with the distinct tools one answer called).
MAX_TOKEN_BYTES = 8192
#: The name the tool calls of an answer are counted under when their names would not fit in a token.
TOOLS_FOLDED = "(tools)"


def key_path(home: Path) -> Path:
    return Path(home) / KEY_FILE


def _check(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: the feedback key is not a regular file; remove it (a new key is made at the next "
                          "start; feedback tokens given before stop working)")
    if st.st_uid != os.geteuid():
        raise ConfigError(f"{path}: the feedback key belongs to uid {st.st_uid}, not to this user ({os.geteuid()}): "
                          "serve from your own home (STREAMGRPO_HOME)")
    if st.st_mode & 0o077:
        raise ConfigError(f"{path}: the feedback key is readable or writable by others (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}): it may be known; remove it (a new key is made at the next "
                          "start; feedback tokens given before stop working), or `chmod 600` it if nobody else could "
                          "have read it")


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:  # a symlink (ELOOP), a directory, no permission
        raise ConfigError(f"{path}: the feedback key cannot be read ({exc.strerror or exc}); it must be a regular "
                          "file of this user, mode 0600: remove it (a new key is made at the next start; feedback "
                          "tokens given before stop working)") from None
    try:
        _check(path, os.fstat(fd))
        text = os.read(fd, 4 * KEY_BYTES + 2)
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigError(f"{path}: the feedback key does not hold {KEY_BYTES} bytes in hex; remove it (a new key is "
                          "made at the next start; feedback tokens given before stop working)")
    return key


def load_or_create_key(home: Path) -> bytes:
    """The server secret of ``home`` (see the module docstring); made once, at the first call."""
    path = key_path(home)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    _write_new(tmp)
    try:
        os.link(tmp, path)  # atomic, and never over a key another serve made meanwhile
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links: create it in place (O_EXCL: never over another's key)
        try:
            _write_new(path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink()
    return _read(path)


def _write_new(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, (secrets.token_bytes(KEY_BYTES).hex() + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenRefused(ValueError):
    """A feedback token that is not this server's for that rollout and client; ``wrong_rollout``: the token is
    valid for this client, but for another rollout."""

    def __init__(self, message: str, wrong_rollout: bool = False) -> None:
        super().__init__(message)
        self.wrong_rollout = wrong_rollout


@dataclass(frozen=True)
class FeedbackTokens:
    """Issues and checks feedback tokens under ``key`` for the topics of ``scope`` (see the module docstring)."""

    key: bytes
    scope: str = ""

    def __post_init__(self) -> None:
        from streamgrpo.redact import register_secret

        if len(self.key) < 16:
            raise ValueError("a feedback key has at least 16 bytes")
        register_secret(self.key.hex())

    @classmethod
    def ephemeral(cls, scope: str = "") -> FeedbackTokens:
        """A key of this process only: its tokens do not survive a restart (for an agent built without a home)."""
        return cls(secrets.token_bytes(KEY_BYTES), scope)

    def _mac(self, client: str, payload: str) -> str:
        message = "\0".join(("streamgrpo-feedback", VERSION, self.scope, client, payload)).encode("utf-8")
        return _b64(hmac.new(self.key, message, hashlib.sha256).digest())

    def issue(self, done: R.RolloutCompleted, client: str) -> str:
        """The token of the served rollout ``done`` for ``client``."""
        tools: dict[str, int] = dict(done.tool_calls)
        for attempt in range(2):
            fields: dict[str, Any] = {"t": done.envelope.task_id, "a": done.adapter_name, "v": done.adapter_version,
                                      "n": done.turns, "s": done.status.value, "k": tools}
            payload = _b64(json.dumps(fields, separators=(",", ":"), sort_keys=True).encode("utf-8"))
            token = f"{VERSION}.{payload}.{self._mac(client, payload)}"
            if len(token) <= MAX_TOKEN_BYTES or attempt:
                return token
            tools = {TOOLS_FOLDED: sum(tools.values())}
        raise AssertionError("unreachable")

    def verify(self, rollout_id: str, client: str, token: str) -> R.RolloutCompleted:
        """The served rollout ``rollout_id`` as the token describes it (what its human Reward needs; question and
        answer are not kept), when ``token`` is this server's for it and ``client``; TokenRefused otherwise."""
        parts = (token or "").split(".")
        if len(parts) != 3 or parts[0] != VERSION or not hmac.compare_digest(
                self._mac(client, parts[1]).encode("ascii"), parts[2].encode("ascii", errors="replace")):
            raise TokenRefused("the feedback_token is missing, not this server's, or not for this client")
        try:
            fields = json.loads(_unb64(parts[1]))
            task_id = str(fields["t"])
            group = ids.group_id(task_id, 0)
            done = R.RolloutCompleted(
                envelope=R.Envelope.new("mcp", task_id=task_id, group_id=group, rollout_id=ids.rollout_id(group, 0)),
                question="", source=f"mcp:{client}", final_answer="", turns=int(fields["n"]),
                status=R.RolloutStatus(fields["s"]), group_size=1, adapter_name=str(fields["a"]),
                adapter_version=int(fields["v"]), duration_ms=0,
                tool_calls={str(k): int(v) for k, v in dict(fields["k"]).items()})
        except (binascii.Error, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            # signed by this key but not readable: a token of another release of this format
            raise TokenRefused(f"the feedback_token cannot be read ({type(exc).__name__})") from None
        if done.envelope.rollout_id != rollout_id:
            raise TokenRefused("the feedback_token is for another rollout", wrong_rollout=True)
        return done

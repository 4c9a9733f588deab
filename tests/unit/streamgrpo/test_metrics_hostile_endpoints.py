"""Reading a metrics endpoint is bounded in size and time, and ``status`` shows whatever an endpoint says without
crashing (issue 24, finding 11); metrics endpoints bind to ``[loop] metrics_bind``, 127.0.0.1 unless set
(finding 12). Real HTTP servers on loopback ports."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import tomllib
import yaml

from streamgrpo import metrics as M
from streamgrpo.cli.status import Report, Service, last_error, probe_services, render
from streamgrpo.config import LoopSettings

ROOT = Path(__file__).resolve().parents[3]


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Endless(BaseHTTPRequestHandler):
    """/metrics: an endless body (1 MiB chunks) for up to 15 s, as a hostile or broken process would send."""

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(200)
        self.end_headers()
        chunk, stop = b"# x\n" * (1 << 18), time.monotonic() + 15
        try:
            while time.monotonic() < stop:
                self.wfile.write(chunk)
        except OSError:
            return

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _Trickle(_Endless):
    """/metrics: a few bytes every 0.1 s (each socket read succeeds within the timeout) for up to 15 s."""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()
        stop = time.monotonic() + 15
        try:
            while time.monotonic() < stop:
                self.wfile.write(b"# x\n")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            return


class _StringLastError(_Endless):
    """A well-formed endpoint whose /status carries ``last_error`` as a string with terminal escapes."""

    def do_GET(self) -> None:  # noqa: N802
        body = b"" if self.path == "/metrics" else json.dumps({"last_error": "boom\x1b]52;c;Zm9v\x07\nnext"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("handler", [_Endless, _Trickle], ids=["endless", "trickle"])
def test_an_endless_or_trickling_body_is_cut_off_in_size_and_time(handler: type[BaseHTTPRequestHandler]) -> None:
    for target in _serve(handler):
        t0 = time.monotonic()
        reading = M.read_endpoint(target, timeout_s=1.0)
        elapsed = time.monotonic() - t0
        assert not reading.up and elapsed < 4.0, (reading, elapsed)
        assert "bytes" in reading.error or "within" in reading.error


def test_a_string_last_error_is_shown_not_a_crash() -> None:
    for target in _serve(_StringLastError):
        services, _ = probe_services({"judge": target}, 2.0)
    assert services[0].up and services[0].last_error == {"time": None, "message": "boom\x1b]52;c;Zm9v\x07\nnext"}
    screen = render(Report(at=time.time(), bootstrap="x", prefix="", services=services))
    line = next(ln for ln in screen.splitlines() if ln.startswith("judge"))
    assert "(time unknown): boom\\x1b]52;c;Zm9v\\x07\\nnext" in line and "\x1b" not in screen


@pytest.mark.parametrize("value", ["text", 42, ["a"], {"message": "m"}, {"time": "yesterday", "message": "m"},
                                   {"time": float("nan"), "message": "m"}, {"time": 5.0, "message": "m"}])
def test_last_error_of_any_shape_renders(value: object) -> None:
    s = Service("judge", "127.0.0.1:1", True, last_error=last_error(value))
    assert "last error" in render(Report(at=10.0, bootstrap="x", prefix="", services=[s]))


def _reachable_from_outside(port: int) -> bool:
    """Whether the port answers on a non-loopback address of this host (skip when there is none)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent, the kernel picks the outbound address
        addr = probe.getsockname()[0]
    except OSError:
        pytest.skip("no non-loopback IPv4 address on this host")
    finally:
        probe.close()
    if addr.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this host")
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((addr, port)) == 0


def test_metrics_bind_loopback_by_default_and_as_configured(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    M.use_config(None)
    try:
        m = M.start("judge", port)
        assert m.port == port and M.read_endpoint(f"127.0.0.1:{port}", 2.0).up
        assert not _reachable_from_outside(port)
        M.stop()
        toml = tmp_path / "s.toml"
        toml.write_text('[loop]\nmetrics_bind = "0.0.0.0"\n')
        M.use_config(str(toml))
        M.start("judge", port)
        assert _reachable_from_outside(port)
    finally:
        M.stop()
        M.use_config(None)


def test_the_k8s_config_binds_metrics_on_every_interface() -> None:
    """Prometheus scrapes pods from outside: the manifests' [loop] must say 0.0.0.0 explicitly."""
    docs = list(yaml.safe_load_all((ROOT / "k8s" / "base" / "config" / "configmap.yaml").read_text()))
    toml = next(d["data"]["streamgrpo.toml"] for d in docs if d and d.get("kind") == "ConfigMap")
    assert LoopSettings(**tomllib.loads(toml)["loop"]).metrics_bind == "0.0.0.0"
    assert LoopSettings().metrics_bind == "127.0.0.1"

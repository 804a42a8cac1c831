"""The HTTP transport against hostile peers on 127.0.0.1: forged proxy headers, requests that never
all come, sessions opened and never closed, refused clients still sending. Real server processes,
with the limits of http_server lowered so that each test waits seconds, not minutes."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROJECT_DIR, write
from tests.test_mcp_http import HEADERS, INITIALIZE, TOKEN, clean_environment

pytestmark = pytest.mark.usefixtures("no_hang")

PROTOCOL = INITIALIZE["params"]["protocolVersion"]
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


@contextmanager
def server(source: Path, tmp_path: Path, env: dict[str, str] | None = None, **limits: float) -> Iterator[tuple[int, Path]]:
    """main.py serve --transport http on a free loopback port, with http_server's ``limits`` set
    first; yields the port (read from its log) and its log."""
    settings = "".join(f"http_server.{name} = {value!r}; " for name, value in limits.items())
    code = f"import sys; sys.path.insert(0, {str(PROJECT_DIR)!r}); import http_server; {settings}import main; sys.exit(main.main(sys.argv[1:]))"
    log = tmp_path / f"server-{time.monotonic_ns()}.log"
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", code, "serve", "--transport", "http", "--port", "0", "--source", str(source),
             "--index-dir", str(tmp_path / "idx")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, env=env or clean_environment(), cwd=tmp_path,
        )
    try:
        for _ in range(1200):
            if found := re.search(r"serving http://127\.0\.0\.1:(\d+)/mcp", log.read_text()):
                break
            assert process.poll() is None, f"the server exited {process.returncode}: {log.read_text()}"
            time.sleep(0.05)
        else:
            raise AssertionError(log.read_text())
        yield int(found.group(1)), log
    finally:
        process.terminate()
        process.wait(30)


def post(port: int, message: dict[str, Any], headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One POST to /mcp on its own connection: (status, headers, body). The whole request is sent
    before any of the reply is read, as most clients do."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/mcp", body if body is not None else json.dumps(message).encode(), {**HEADERS, **(headers or {})})
        reply = connection.getresponse()
        return reply.status, {name.lower(): value for name, value in reply.getheaders()}, reply.read()
    finally:
        connection.close()


def open_session(port: int) -> str:
    status, headers, _ = post(port, INITIALIZE)
    assert status == 200, status
    session = headers["mcp-session-id"]
    assert post(port, INITIALIZED, in_session(session))[0] == 202
    return session


def in_session(session: str) -> dict[str, str]:
    return {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}


def head(port: int, length: int, **headers: str) -> bytes:
    """A POST request head for a body of ``length`` bytes."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in {**HEADERS, "Host": f"127.0.0.1:{port}", **headers}.items())
    return f"POST /mcp HTTP/1.1\r\n{lines}Content-Length: {length}\r\n\r\n".encode()


def test_x_forwarded_for_is_not_believed(source: Path, tmp_path: Path) -> None:
    # uvicorn takes the client's address from X-Forwarded-For when the peer is loopback, unless told
    # not to: garbage made the owner check raise (500), another address made it judge that one.
    with server(source, tmp_path) as (port, log):
        for forged in ("garbage", "10.0.0.1", "203.0.113.9:4444", "127.0.0.1:1", "[::1]:80, 10.0.0.2"):
            status, _, body = post(port, INITIALIZE, {"X-Forwarded-For": forged, "X-Forwarded-Proto": "https"})
            assert status == 200, (forged, status, body)
        assert "Traceback" not in log.read_text()


def test_a_request_whose_body_never_all_comes_is_answered_408_and_gives_its_slot_back(source: Path, tmp_path: Path) -> None:
    with server(source, tmp_path, REQUEST_SECONDS=3, MAX_CONCURRENT_REQUESTS=1) as (port, _):
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(head(port, 1000) + b"{")
            for _ in range(100):  # it holds the only request slot meanwhile
                if post(port, INITIALIZE)[0] == 503:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError("the slow request never held its slot")
            slow.settimeout(0.1)
            reply, closed = b"", False
            for _ in range(300):  # a byte every 0.1 s at most: 30 s, far past REQUEST_SECONDS
                try:
                    slow.sendall(b" ")
                    chunk = slow.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    break
                reply += chunk
                if not chunk:
                    closed = True
                    break
            assert closed and reply.startswith(b"HTTP/1.1 408 "), reply
            assert b"did not all come within 3 s" in reply
        for _ in range(100):  # the slot is given back as the connection ends
            if post(port, INITIALIZE)[0] == 200:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the slot was never given back")


def test_sessions_past_the_limit_end_the_one_idle_longest(source: Path, tmp_path: Path) -> None:
    with server(source, tmp_path, MAX_SESSIONS=3) as (port, _):
        first, second, third = (open_session(port) for _ in range(3))
        assert post(port, PING, in_session(first))[0] == 200  # so the second is the one idle longest
        fourth = open_session(port)  # the SDK answered 503 here until a session idled out (30 minutes)
        assert [post(port, PING, in_session(session))[0] for session in (first, second, third, fourth)] == [200, 404, 200, 200]

        with socket.create_connection(("127.0.0.1", port)) as stream:  # a GET stream keeps its session busy
            lines = "".join(f"{name}: {value}\r\n" for name, value in in_session(third).items())
            stream.sendall(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n{lines}\r\n".encode())
            stream.settimeout(30)
            assert stream.recv(65536).startswith(b"HTTP/1.1 200 ")
            later = [open_session(port) for _ in range(10)]  # each a new session, none refused
            alive = [session for session in (first, third, fourth, *later) if post(port, PING, in_session(session))[0] == 200]
            assert alive == [third, *later[-2:]]


ANOTHER_USER_PROBE = """
import http.client, sys
connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
try:
    connection.request("POST", "/mcp", b" " * 1_000_000, {"Content-Type": "application/json", "X-Forwarded-For": sys.argv[2]})
    reply = connection.getresponse()
    print(reply.status, reply.read().decode())
except OSError as error:
    print("lost:", error)
"""


def as_another_user(*args: str) -> str:
    """ANOTHER_USER_PROBE's output, run as uid 65534."""
    for python in dict.fromkeys([sys.executable, getattr(sys, "_base_executable", sys.executable), "/usr/bin/python3"]):
        try:
            return subprocess.run([python, "-I", "-c", ANOTHER_USER_PROBE, *args], capture_output=True, text=True, timeout=60,
                                  user=65534, group=65534, extra_groups=[], cwd="/").stdout
        except PermissionError:  # a Python under a folder that user may not enter
            continue
    pytest.skip("no Python here that another user may run")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_another_user_reads_its_403_while_still_sending(source: Path, tmp_path: Path) -> None:
    # The refusal was written as the connection opened and the socket closed: the client's request
    # then met a reset, which threw away the 403 it had not read yet. Its X-Forwarded-For names a
    # connection of root's, open meanwhile: believed, it would be let through.
    with server(source, tmp_path) as (port, _):
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as own:
                own.sendall(head(port, len(json.dumps(INITIALIZE))) + json.dumps(INITIALIZE).encode())
                assert own.recv(65536).startswith(b"HTTP/1.1 200 ")
                seen = as_another_user(str(port), "127.0.0.1:%d" % own.getsockname()[1])
            assert seen.startswith("403 this server answers only the user who started it"), seen


def test_a_refused_request_still_sending_its_body_reads_the_refusal(source: Path, tmp_path: Path) -> None:
    # The server answered 401 and closed with the body still coming: the kernel reset the
    # connection, and a client that sends its whole request before reading got only an error.
    with server(source, tmp_path, env=clean_environment(DOCSEARCH_TOKEN=TOKEN)) as (port, _):
        for _ in range(5):
            status, headers, body = post(port, {}, body=b" " * 8_000_000)
            assert (status, headers["connection"]) == (401, "close") and b"bearer token is required" in body


def test_a_closing_connection_waits_for_the_client_a_bounded_time(source: Path, tmp_path: Path) -> None:
    with server(source, tmp_path, env=clean_environment(DOCSEARCH_TOKEN=TOKEN), CLOSE_LINGER_SECONDS=1) as (port, _):
        with socket.create_connection(("127.0.0.1", port)) as endless:
            endless.sendall(head(port, 10**12))  # refused (no token), and its body never ends
            endless.settimeout(0.01)
            reply, ended = b"", False
            for _ in range(2000):  # 64 KiB every 0.01 s at most: 20 s, far past CLOSE_LINGER_SECONDS
                time.sleep(0.01)
                try:
                    if not ended:  # the reply, then the end of the server's side: it still reads
                        chunk = endless.recv(65536)
                        reply, ended = reply + chunk, not chunk
                    endless.sendall(b" " * 65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
            else:
                raise AssertionError("the connection was never closed")
            assert ended and reply.startswith(b"HTTP/1.1 401 "), reply

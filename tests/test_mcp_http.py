"""The server over Streamable HTTP, as clients see it: a real subprocess, driven by the SDK's
Streamable HTTP client and by plain HTTP requests for what a client should never get through."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from exceptions import ConfigError
from http_server import REQUEST_SECONDS, Gate, HttpSettings, http_settings, listening_socket, own_hosts, peer_uid, read_token
from models import VERSION
from tests.conftest import MAIN_PY, write
from tests.mcp_client import call, wait_for

TOKEN = "s3cret-token-for-tests-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without settings that would change what the server does."""
    return {**{key: value for key, value in os.environ.items() if not key.startswith("DOCSEARCH_")}, **extra}


@contextmanager
def http_server(source: Path, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A server on a free loopback port; yields its /mcp URL, read from its log."""
    log = tmp_path / f"server-{time.monotonic_ns()}.log"
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            [sys.executable, str(MAIN_PY), "serve", "--transport", "http", "--port", "0", "--source", str(source),
             "--index-dir", str(tmp_path / "idx"), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, env=env or clean_environment(),
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"serving (http://\S+/mcp)", log.read_text())):
            assert process.poll() is None, f"the server exited {process.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(30)


def refused_start(source: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    """Start an HTTP server that must refuse to start; its error message."""
    run = subprocess.run(
        [sys.executable, str(MAIN_PY), "serve", "--transport", "http", "--source", str(source), *flags],
        capture_output=True, text=True, timeout=60, env=env or clean_environment(), stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2, run.stderr
    return run.stderr


def with_token(url: str, token: str) -> Any:
    """A Streamable HTTP client transport sending a bearer token."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
    return streamable_http_client(url, http_client=http)


@pytest.mark.anyio
async def test_several_clients_share_one_index_over_http(source: Path, tmp_path: Path) -> None:
    write(source, "network/firewall.md", "# Firewall\n\nOpen port 22: `ufw allow 22`.\n")
    with http_server(source, tmp_path, "--scan-interval", "0") as url:
        assert url.startswith("http://127.0.0.1:")
        async with Client(url) as first, Client(url) as second:
            assert (first.server_info.name, first.server_info.version) == ("docsearch", VERSION)
            tools = {tool.name for tool in (await first.list_tools()).tools}
            assert tools == {"search", "get_index_status", "refresh_index", "get_document", "list_files"}

            async def idle() -> bool:
                return (await call(second, "get_index_status"))["state"] == "idle"

            await wait_for(idle)
            write(source, "fresh.md", "# Fresh\n\nkumquat harvest\n")
            assert (await call(first, "refresh_index", {"filepath": "fresh.md"}))["files_processed"] == 1
            assert (await call(second, "search", {"query": "kumquat"}))["results"][0]["path"] == "fresh.md"

            found: dict[str, list[str]] = {}

            async def search(name: str, client: Client) -> None:
                for _ in range(10):
                    reply = await call(client, "search", {"query": "open a port in the firewall"})
                    found.setdefault(name, []).append(reply["results"][0]["path"])

            async with anyio.create_task_group() as group:  # both at once, one writer, one index
                group.start_soon(search, "first", first)
                group.start_soon(search, "second", second)
            assert found == {"first": ["network/firewall.md"] * 10, "second": ["network/firewall.md"] * 10}
            document = await call(second, "get_document", {"path": "fresh.md"})
            assert "kumquat" in document["text"]

            progress: list[tuple[float, float | None]] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append((done, total))

            full = await first.call_tool("refresh_index", {}, progress_callback=on_progress)
            assert not full.is_error and full.structured_content["success"] is True
            # How many files the scan re-reads depends on how recently each was written (the load on
            # the machine): what matters is that progress reaches the client and ends complete.
            assert progress and progress[-1][0] == progress[-1][1] >= 1, "progress reaches an HTTP client that asks for it"


@pytest.mark.anyio
async def test_a_token_is_required_once_given(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "# A\n\nkumquat\n")
    with http_server(source, tmp_path, env=clean_environment(DOCSEARCH_TOKEN=TOKEN)) as url:
        async with Client(with_token(url, TOKEN)) as client:
            assert (await call(client, "get_index_status"))["source_directory"] == str(source.resolve())
        async with httpx2.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN},
                            {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"}):
                refused = await http.post(url, json=INITIALIZE, headers={**HEADERS, **headers})
                assert refused.status_code == 401, headers
                assert refused.headers["www-authenticate"].startswith("Bearer")
            accepted = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"bearer {TOKEN}"})
            assert accepted.status_code == 200
        with pytest.raises(Exception):  # noqa: B017 - the SDK's client fails its handshake, whatever it raises
            with anyio.fail_after(60):
                async with Client(with_token(url, "wrong-token-0123456789")) as client:
                    await client.list_tools()


@pytest.mark.anyio
async def test_a_foreign_host_or_origin_is_refused(source: Path, tmp_path: Path) -> None:
    with http_server(source, tmp_path) as url:
        port = url.split(":")[2].split("/")[0]
        async with httpx2.AsyncClient() as http:
            for name in ("127.0.0.1", "localhost", "[::1]"):
                own = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Host": f"{name}:{port}", "Origin": f"http://{name}:{port}"})
                assert own.status_code == 200, name
            rebound = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Host": f"attacker.example:{port}"})
            assert rebound.status_code == 421
            for origin in ("http://attacker.example", f"http://attacker.example:{port}", "http://localhost:3000", "null"):
                page = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Origin": origin})
                assert page.status_code == 403, origin


def test_a_non_loopback_address_needs_the_flag_and_a_token(source: Path, tmp_path: Path) -> None:
    assert "not a loopback address" in refused_start(source, "--host", "0.0.0.0")
    assert "--allow-remote" in refused_start(source, "--host", "0.0.0.0")
    assert "needs a bearer token" in refused_start(source, "--host", "0.0.0.0", "--allow-remote")
    short = refused_start(source, "--host", "0.0.0.0", "--allow-remote", env=clean_environment(DOCSEARCH_TOKEN="short"))
    assert "at least 16 characters" in short


def test_a_port_in_use_is_a_clear_error(source: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert "cannot listen on 127.0.0.1" in refused_start(source, "--port", str(port))


@pytest.mark.anyio
async def test_a_remote_bind_with_a_token_serves_with_the_token_only(source: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with http_server(source, tmp_path, "--host", "0.0.0.0", "--allow-remote", "--token-file", str(token_file)) as url:
        local = url.replace("0.0.0.0", "127.0.0.1")
        async with Client(with_token(local, TOKEN)) as client:
            assert (await call(client, "get_index_status"))["state"] in ("starting", "indexing", "idle")
        async with httpx2.AsyncClient() as http:
            assert (await http.post(local, json=INITIALIZE, headers=HEADERS)).status_code == 401


@pytest.mark.parametrize(
    ("content", "mode", "problem"),
    [
        (TOKEN, 0o644, "chmod 600"),
        (TOKEN, 0o640, "chmod 600"),
        ("", 0o600, "at least 16 characters"),
        ("two words but long enough", 0o600, "one word"),
        ("tökén-with-non-ascii-letters", 0o600, "printable ASCII"),
        ("x" * 5000, 0o600, "larger than"),
    ],
)
def test_a_token_file_that_is_unsafe_or_not_a_token_is_refused(tmp_path: Path, content: str, mode: int, problem: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(content)
    token_file.chmod(mode)
    with pytest.raises(ConfigError, match=problem):
        read_token(token_file, {})


def test_a_token_file_must_be_a_regular_file_of_its_own(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text(TOKEN)
    real.chmod(0o600)
    (tmp_path / "link").symlink_to(real)
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        read_token(tmp_path / "link", {})
    with pytest.raises(ConfigError, match="not a regular file"):
        read_token(tmp_path / "fifo", {})
    (tmp_path / "folder").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_token(tmp_path / "folder", {})
    with pytest.raises(ConfigError, match="cannot open"):
        read_token(tmp_path / "missing", {})
    assert read_token(real, {"DOCSEARCH_TOKEN": "another-token-from-env"}) == TOKEN  # the file wins
    assert read_token(None, {"DOCSEARCH_TOKEN": f"  {TOKEN}\n"}) == TOKEN
    assert read_token(None, {}) is None


@pytest.mark.parametrize(
    ("host", "port", "flags", "problem"),
    [
        ("", 8765, {}, "not a host name"),
        ("evil.example/path", 8765, {}, "not a host name"),
        ("127.0.0.1", 70000, {}, "0-65535"),
        ("127.0.0.1", -1, {}, "0-65535"),
        ("10.0.0.5", 8765, {}, "not a loopback address"),
        ("::", 8765, {"allow_remote": True}, "needs a bearer token"),
        ("127.0.0.1", 8765, {"extra_hosts": ["a b"]}, "not a host name"),
    ],
)
def test_http_settings_are_checked_together(host: str, port: int, flags: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        http_settings(host, port, flags.get("allow_remote", False), None, flags.get("extra_hosts", []), {})


def test_the_hosts_a_server_answers_to() -> None:
    loopback = own_hosts(HttpSettings("127.0.0.1", 0, None, ("notes.lan",)), 8765)
    assert set(loopback) == {"notes.lan:8765", "127.0.0.1:8765", "localhost:8765", "[::1]:8765"}
    assert own_hosts(HttpSettings("::1", 0, None), 80)[-3:] == ["127.0.0.1", "localhost", "[::1]"]
    remote = own_hosts(HttpSettings("10.1.2.3", 0, TOKEN), 9000)
    assert remote == ["10.1.2.3:9000"]
    everywhere = own_hosts(HttpSettings("0.0.0.0", 0, TOKEN), 9000)
    assert {"0.0.0.0:9000", "127.0.0.1:9000", f"{socket.gethostname()}:9000"} <= set(everywhere)


def scope(host: str | None = "127.0.0.1:8765", **headers: str) -> dict[str, Any]:
    """An ASGI request scope from this process to a server on 127.0.0.1:8765."""
    listed = [(b"host", host.encode())] if host is not None else []
    listed += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    return {"type": "http", "headers": listed, "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8765)}


@pytest.mark.parametrize(
    ("request_scope", "status"),
    [
        (scope(authorization=f"Bearer {TOKEN}"), None),
        (scope(authorization=f"BEARER {TOKEN}"), None),
        (scope("LOCALHOST:8765", authorization=f"bearer  {TOKEN} "), None),
        (scope(origin="http://[::1]:8765", authorization=f"Bearer {TOKEN}"), None),
        (scope(), 401),
        (scope(authorization="Bearer"), 401),
        (scope(authorization=f"Bearer {TOKEN[:-1]}"), 401),
        (scope(authorization=TOKEN), 401),
        (scope(authorization=f"Basic {TOKEN}"), 401),
        # Two headers: which one a proxy would pass on is not known; refused.
        ({**scope(authorization=f"Bearer {TOKEN}"), "headers": scope(authorization=f"Bearer {TOKEN}")["headers"] * 2}, 421),
        (scope("evil.example:8765", authorization=f"Bearer {TOKEN}"), 421),
        (scope("127.0.0.1:8766", authorization=f"Bearer {TOKEN}"), 421),
        (scope("127.0.0.1", authorization=f"Bearer {TOKEN}"), 421),
        (scope(None, authorization=f"Bearer {TOKEN}"), 421),
        (scope(origin="http://localhost:3000", authorization=f"Bearer {TOKEN}"), 403),
        (scope(origin="null", authorization=f"Bearer {TOKEN}"), 403),
        ({**scope(authorization=f"Bearer {TOKEN}"), "headers": scope(origin="http://127.0.0.1:8765", authorization=f"Bearer {TOKEN}")["headers"]
          + [(b"origin", b"http://evil.example")]}, 403),
        ({**scope(), "headers": scope()["headers"] + [(b"authorization", f"Bearer {TOKEN}".encode())] * 2}, 401),
    ],
)
def test_the_gate_with_a_token(request_scope: dict[str, Any], status: int | None) -> None:
    gate = Gate(None, own_hosts(HttpSettings("127.0.0.1", 0, TOKEN), 8765), TOKEN, any_address=False)
    refusal = gate.refusal(request_scope)
    assert (refusal and refusal[0]) == status, refusal


def test_bound_to_every_address_the_address_a_request_came_to_is_the_servers_own() -> None:
    gate = Gate(None, own_hosts(HttpSettings("0.0.0.0", 0, TOKEN), 9000), TOKEN, any_address=True)
    arrived = {**scope("192.0.2.7:9000", authorization=f"Bearer {TOKEN}"), "server": ("192.0.2.7", 9000)}
    assert gate.refusal(arrived) is None
    assert gate.refusal({**arrived, "server": ("192.0.2.8", 9000)})[0] == 421


def test_the_user_at_the_other_end_of_a_loopback_connection_is_known() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening:
        with socket.create_connection(listening.getsockname()) as client:
            client_end = client.getsockname()
            accepted, _ = listening.accept()
            with accepted:
                assert peer_uid(client.getsockname(), listening.getsockname()) == os.getuid()
                assert peer_uid(accepted.getpeername(), listening.getsockname()) == os.getuid()
                assert peer_uid(("127.0.0.1", 1), listening.getsockname()) is None
        time.sleep(0.1)  # closed, its end waits in FIN_WAIT/TIME_WAIT, where the kernel says uid 0: no owner
        assert peer_uid(client_end, listening.getsockname()) is None
        # A client end reset and gone, and someone listening on its port now: the kernel would answer
        # with that listener, whose owner is not the client's.
        with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as gone:
            gone.connect(server.getsockname())
            gone_end = gone.getsockname()
            gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            gone.close()
            with socket.socket() as squatter:
                squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                squatter.bind(gone_end)
                squatter.listen()
                assert peer_uid(gone_end, server.getsockname()) is None
        if socket.has_ipv6:  # a client on an IPv6 socket reaching 127.0.0.1 as ::ffff:127.0.0.1 (listed in tcp6)
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as mapped:
                mapped.connect(("::ffff:127.0.0.1", listening.getsockname()[1]))
                accepted, _ = listening.accept()
                with accepted:
                    assert peer_uid(accepted.getpeername(), listening.getsockname()) == os.getuid()
    if socket.has_ipv6:
        try:
            listening6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
        except OSError:
            return  # no IPv6 loopback here
        with listening6, socket.create_connection(listening6.getsockname()[:2]) as client6:
            assert peer_uid(client6.getsockname()[:2], listening6.getsockname()[:2]) == os.getuid()


OTHER_USER_PROBE = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST", headers=json.loads(sys.argv[3]))
try:
    with urllib.request.urlopen(request, timeout=30) as reply:
        print(reply.status, reply.read().decode())
except urllib.error.HTTPError as refused:
    print(refused.code, refused.read().decode())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_without_a_token_other_users_of_the_machine_are_refused(source: Path, tmp_path: Path) -> None:
    write(source, "secret.md", "# Secret\n\nhunter2\n")
    with http_server(source, tmp_path) as url:
        def probe(user: int) -> str:
            for python in dict.fromkeys([sys.executable, getattr(sys, "_base_executable", sys.executable), "/usr/bin/python3"]):
                try:
                    return subprocess.run(
                        [python, "-I", "-c", OTHER_USER_PROBE, url, json.dumps(INITIALIZE), json.dumps(HEADERS)],
                        capture_output=True, text=True, timeout=60, user=user, group=user, extra_groups=[], cwd="/",
                    ).stdout
                except PermissionError:  # a Python under a folder that user may not enter
                    continue
            pytest.skip("no Python here that another user may run")

        assert probe(65534).startswith("403 this server answers only the user who started it")
        assert probe(0).startswith("200")


def test_a_connection_that_sends_no_whole_request_is_closed(source: Path, tmp_path: Path) -> None:
    def closed_in_time(connection: socket.socket) -> bool:
        connection.settimeout(REQUEST_SECONDS + 20)
        started = time.monotonic()
        while connection.recv(65536):  # the rest of a reply, then the end
            pass
        return time.monotonic() - started < REQUEST_SECONDS + 15

    with http_server(source, tmp_path) as url:
        host, port = url.split("/")[2].rsplit(":", 1)
        with socket.create_connection((host, int(port))) as first:  # its first request never ends
            first.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert closed_in_time(first)
        with socket.create_connection((host, int(port))) as second:  # a byte a second after a whole request
            body = json.dumps(INITIALIZE).encode()
            head = "".join(f"{name}: {value}\r\n" for name, value in {**HEADERS, "Host": f"{host}:{port}"}.items())
            second.sendall(f"POST /mcp HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert b"200 OK" in second.recv(65536)
            answered, closed = time.monotonic(), False
            second.settimeout(1)
            for byte in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:" + b"1" * 100:  # a byte a second
                try:
                    second.sendall(bytes([byte]))
                    closed = second.recv(65536) == b""  # else the rest of the first reply
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                if closed:
                    break
            assert closed and time.monotonic() - answered < REQUEST_SECONDS + 5


def test_http_flags_are_refused_on_stdio_and_an_empty_token_is_not_no_token(source: Path) -> None:
    for flags in (["--port", "9000"], ["--host", "127.0.0.1"], ["--allow-remote"], ["--token-file", "t"], ["--allow-host", "x"]):
        run = subprocess.run([sys.executable, str(MAIN_PY), "serve", "--source", str(source), *flags],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_environment())
        assert run.returncode == 2 and "is for --transport http" in run.stderr, (flags, run.stderr)
    assert "at least 16 characters" in refused_start(source, env=clean_environment(DOCSEARCH_TOKEN=""))


def test_the_listening_socket_says_it_is_tcp_so_replies_are_not_held_back() -> None:
    # asyncio turns Nagle's algorithm off only on sockets whose proto says TCP; without that each
    # reply waited for the client's delayed ACK (~40 ms a call, measured in 3170e8a).
    with listening_socket(HttpSettings("127.0.0.1", 0, None)) as listening:
        assert listening.proto == socket.IPPROTO_TCP
        with socket.create_connection(listening.getsockname()):
            accepted, _ = listening.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP

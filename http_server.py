"""The MCP tools over Streamable HTTP: who may connect, and the HTTP server itself.

Loopback by default. Any other address needs ``--allow-remote`` and a bearer token, or the server
does not start. Every request passes a gate first (Gate):
- its ``Host``, and its ``Origin`` when a browser sends one, must name this server, so a web page
  cannot reach it by rebinding its own name to 127.0.0.1;
- with a token, it must carry ``Authorization: Bearer <token>``; without one (loopback only), it
  must come from the user who started the server, or root: other users of the machine cannot read
  your files through it. Linux tells which user owns the other end of a loopback connection
  (sock_diag, asked for that one socket); where that cannot be known, a token is required. The
  socket alone tells who is at the other end: proxy headers (X-Forwarded-For) are not believed.

Only ``serve --transport http`` imports this module's server part (uvicorn, the SDK's app).
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import logging
import os
import socket
import stat
import struct
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from exceptions import ConfigError

logger = logging.getLogger("docsearch")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
ENDPOINT = "/mcp"
#: Holds the bearer token when --token-file is not given.
TOKEN_ENV_VAR = "DOCSEARCH_TOKEN"
#: A shorter token could be guessed by trying; `secrets.token_urlsafe(32)` gives 43 characters.
MIN_TOKEN_CHARS = 16
MAX_TOKEN_FILE_BYTES = 4096
#: How long Ctrl-C waits for open streams (a client's GET stream never ends by itself).
GRACEFUL_SHUTDOWN_SECONDS = 3
#: A connection whose next request, head and body, has not all come this long after it opened, or
#: after its last reply, is answered 408 and closed (uvicorn waits for ever); another user's (whose
#: request is refused whatever it asks) sooner.
REQUEST_SECONDS = 10
OTHER_USER_REQUEST_SECONDS = 2
#: A closing connection waits this long at most for the client to close its side, reading what it
#: still sends (see _LingeringTransport).
CLOSE_LINGER_SECONDS = 2
#: Requests let through the gate running at once, beyond which it answers 503; and MCP sessions
#: open at once (each holds memory until it ends or idles out; past the limit, the one idle longest
#: is ended to make room: see Sessions).
MAX_CONCURRENT_REQUESTS = 200
MAX_SESSIONS = 500
SESSION_IDLE_SECONDS = 30 * 60
LISTEN_BACKLOG = 128
#: Loggers whose messages a client can cause at will: each message is logged at most once a minute.
NOISY_LOGGERS = ("asyncio", "uvicorn.error", "mcp.server.streamable_http", "mcp.server.streamable_http_manager")
#: Linux's socket diagnostics over netlink (linux/netlink.h, linux/sock_diag.h): who owns a socket.
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR, _TCP_LISTEN = 4, 20, 1, 2, 10
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
MAKE_TOKEN = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'


@dataclass(frozen=True)
class HttpSettings:
    """Where to listen and who may connect (validated: see http_settings)."""

    host: str
    port: int
    token: str | None
    #: Host names clients use to reach the server, besides its own address (--allow-host).
    extra_hosts: tuple[str, ...] = ()


def http_settings(
    host: str, port: int, allow_remote: bool, token_file: Path | None, extra_hosts: list[str], environ: Mapping[str, str]
) -> HttpSettings:
    """Check the HTTP flags together; a ConfigError names the flag and what to do."""
    if not host or any(char.isspace() or char in "/#?@[]" for char in host.strip("[]")):
        raise ConfigError("--host", f"{host!r} is not a host name or address")
    host = host.strip("[]")  # "[::1]" as written in a URL
    if not 0 <= port <= 65535:
        raise ConfigError("--port", f"must be 0-65535 (0: any free port), got {port}")
    for name in extra_hosts:
        if not name or any(char.isspace() or char in "/#?@" for char in name):
            raise ConfigError("--allow-host", f"{name!r} is not a host name")
    token = read_token(token_file, environ)
    if token is None and not owner_lookup_works():
        raise ConfigError(
            "--token-file", "without a token only you may connect, and this system cannot tell which user a connection"
            f" comes from (Linux's sock_diag): give a token with --token-file FILE or {TOKEN_ENV_VAR}"
        )
    if not is_loopback(host):
        if not allow_remote:
            raise ConfigError(
                "--host", f"{host} is not a loopback address: other machines could connect. Add --allow-remote"
                f" and a bearer token (--token-file FILE or {TOKEN_ENV_VAR}) if you mean it"
            )
        if token is None:
            raise ConfigError(
                "--allow-remote", f"needs a bearer token: --token-file FILE (readable only by you) or {TOKEN_ENV_VAR};"
                f" make one with {MAKE_TOKEN}"
            )
    return HttpSettings(host, port, token, tuple(extra_hosts))


def read_token(token_file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The bearer token from --token-file (which wins) or the environment; None if neither."""
    if token_file is not None:
        origin = f"--token-file {token_file}"
        try:
            descriptor = os.open(token_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            problem = "is a symbolic link: give the file itself" if exc.errno == errno.ELOOP else f"cannot open: {exc.strerror or exc}"
            raise ConfigError("--token-file", problem, origin) from None
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError("--token-file", "is not a regular file", origin)
            if info.st_mode & 0o077:
                raise ConfigError(
                    "--token-file", f"other users can read it (mode {stat.S_IMODE(info.st_mode):o}): chmod 600 {token_file}", origin
                )
            data = os.read(descriptor, MAX_TOKEN_FILE_BYTES + 1)
        finally:
            os.close(descriptor)
        if len(data) > MAX_TOKEN_FILE_BYTES:
            raise ConfigError("--token-file", f"is larger than {MAX_TOKEN_FILE_BYTES} bytes: it should hold only the token", origin)
        return _checked_token(data.decode("utf-8", "replace"), origin)
    if TOKEN_ENV_VAR in environ:  # set but empty is a mistake (a $(cat file) that found nothing), not "no token"
        return _checked_token(environ[TOKEN_ENV_VAR], f"environment variable {TOKEN_ENV_VAR}")
    return None


def _checked_token(text: str, origin: str) -> str:
    token = text.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError("token", f"must be at least {MIN_TOKEN_CHARS} characters; make one with {MAKE_TOKEN}", origin)
    if not token.isascii() or not token.isprintable() or any(char.isspace() for char in token):
        raise ConfigError("token", "must be one word of printable ASCII (it is sent in an HTTP header)", origin)
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def own_hosts(settings: HttpSettings, port: int) -> list[str]:
    """The Host header values that name this server (a browser's Origin must be one of them too):
    every loopback name on a loopback address; the address itself, the machine's names and the
    --allow-host names otherwise."""
    names = list(settings.extra_hosts)
    if is_loopback(settings.host):
        names += LOOPBACK_NAMES
    else:
        names.append(_in_url(settings.host))
        if _is_wildcard(settings.host):
            names += [*LOOPBACK_NAMES, *_machine_names()]
    names = [name.lower() for name in dict.fromkeys(names)]
    hosts = [f"{name}:{port}" for name in names]
    if port == 80:  # a client leaves the default port out of Host
        hosts += names
    return hosts


def _in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _machine_names() -> list[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to."""
    names = [socket.gethostname(), socket.getfqdn()]
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        infos = []
    return names + [_in_url(str(info[4][0])) for info in infos]


def listening_socket(settings: HttpSettings) -> socket.socket:
    """Bind now, so that a port in use or a bad address is a clear error before anything starts."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    # IPPROTO_TCP said outright: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets
    # that say so, and with it on, every reply waited ~40 ms for the client's delayed ACK.
    listening = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((settings.host, settings.port))
        listening.listen(LISTEN_BACKLOG)
        return listening
    except (OSError, OverflowError) as exc:
        listening.close()
        raise ConfigError("--host/--port", f"cannot listen on {settings.host}:{settings.port}: {getattr(exc, 'strerror', None) or exc}") from None


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The user owning the client's end of a TCP connection made on this machine; None if there is
    no such socket, or no process holds it any more (closed, in TIME_WAIT: its uid reads 0, root,
    whoever made it). Asks the kernel for that one socket (sock_diag netlink: a hashed lookup,
    microseconds whatever the number of sockets). An IPv4 client may hold an IPv6 socket connected
    to an IPv4-mapped address."""
    asked = [(client, server)]
    if ipaddress.ip_address(client[0]).version == 4:
        asked.append(((f"::ffff:{client[0]}", client[1]), (f"::ffff:{server[0]}", server[1])))
    for source, destination in asked:
        found = _sock_diag(source, destination)
        if found is not None:
            uid, inode = found
            return uid if inode else None
    return None


def _sock_diag(source: tuple[str, int], destination: tuple[str, int]) -> tuple[int, int] | None:
    """(uid, inode) of the TCP socket with this source and destination (struct inet_diag_req_v2
    and inet_diag_msg, linux/inet_diag.h); None if the kernel has none."""
    here, there = ipaddress.ip_address(source[0]), ipaddress.ip_address(destination[0])
    family = socket.AF_INET if here.version == 4 else socket.AF_INET6
    socket_id = struct.pack("!HH16s16s", source[1], destination[1], here.packed.ljust(16, b"\0"), there.packed.ljust(16, b"\0"))
    socket_id += struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface; no cookie to check
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + socket_id  # all states
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as netlink:
        netlink.settimeout(1.0)
        netlink.send(header + request)
        reply = netlink.recv(8192)
    length, kind = struct.unpack_from("=IH", reply)
    if kind == _NLMSG_ERROR or length < 16 + 72 or len(reply) < 16 + 72:
        return None
    # The kernel answers with a listening socket on that address when no connection matches (the
    # client gone): only the very socket asked for will do.
    if reply[17] == _TCP_LISTEN or reply[20:56] != socket_id[:36]:
        return None
    uid, inode = struct.unpack_from("=II", reply, 16 + 64)  # after family..retrans, the id, expires and queues
    return uid, inode


def owner_lookup_works() -> bool:
    """Whether this system tells who owns the other end of a loopback connection: tried on one."""
    try:
        with socket.create_server(("127.0.0.1", 0)) as listening, socket.create_connection(listening.getsockname()):
            accepted, peer = listening.accept()
            with accepted:
                return peer_uid(peer[:2], listening.getsockname()[:2]) == os.getuid()
    except (OSError, AttributeError, struct.error):  # no AF_NETLINK (not Linux), or a kernel that refuses
        return False


class ConnectionOwners:
    """Who may use each open connection (its client end's owner is the user who started the server,
    or root), decided once as it opens, on the socket's own peer address. An entry goes when its
    connection closes, so a port used again is looked up again."""

    def __init__(self) -> None:
        self.user = os.getuid()
        self.allowed: dict[tuple[str, int], bool] = {}

    def opened(self, client: tuple[str, int], server: tuple[str, int]) -> bool:
        self.allowed[client] = peer_uid(client, server) in (self.user, 0)
        return self.allowed[client]

    def closed(self, client: tuple[str, int]) -> None:
        self.allowed.pop(client, None)

    def may_use(self, client: tuple[str, int]) -> bool:
        """Only a connection judged as it opened: an address from anywhere else (a header) is no one's."""
        return self.allowed.get(client, False)

    def refusal(self) -> str:
        return f"this server answers only the user who started it (uid {self.user}); or start it with a token"


class Gate:
    """ASGI middleware in front of the MCP app: a request gets through only if its Host (and
    Origin, if any) name this server, and it carries the token, or, without a token, it comes
    from the user who started the server (or root). At most MAX_CONCURRENT_REQUESTS that got
    through run at once: refused ones never count, so they cannot crowd out the user's."""

    def __init__(self, app: Any, hosts: list[str], token: str | None, any_address: bool, owners: ConnectionOwners | None = None) -> None:
        self.app = app
        self.sessions = Sessions(app)
        self.owners = owners or ConnectionOwners()
        self.hosts = frozenset(hosts)
        self.token = token.encode() if token is not None else None
        self.any_address = any_address  # bound to 0.0.0.0 or ::: the address a connection came to is ours too
        self.running = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self.refusal(scope)
        if refusal is None and self.running >= MAX_CONCURRENT_REQUESTS:
            refusal = 503, f"busy: {MAX_CONCURRENT_REQUESTS} requests are running; try again"
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        self.running += 1
        try:
            await self.sessions.serve(scope, receive, send)
        finally:
            self.running -= 1

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """Why this request is refused, as (HTTP status, message); None if it may go on."""
        host, origin, authorization = (_header_values(scope["headers"], name) for name in (b"host", b"origin", b"authorization"))
        hosts = self.hosts
        if self.any_address and scope.get("server"):
            hosts = hosts | {f"{_in_url(scope['server'][0])}:{scope['server'][1]}"}
        if len(host) != 1 or host[0].lower() not in hosts:
            return 421, "the Host header does not name this server; if clients reach it by that name, start it with --allow-host NAME"
        origins = {f"{scheme}://{name}" for name in hosts for scheme in ("http", "https")}
        if len(origin) > 1 or (origin and origin[0].lower() not in origins):
            return 403, "the Origin is not this server: web pages may not call it"
        if self.token is not None:
            scheme, _, given = (authorization[0] if len(authorization) == 1 else "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                return 401, "a bearer token is required: send the header Authorization: Bearer TOKEN"
            return None
        client = scope.get("client")  # the socket's peer: uvicorn is told to believe no X-Forwarded-For
        if not (client and self.owners.may_use(tuple(client))):
            return 403, self.owners.refusal()
        return None


class Sessions:
    """The MCP sessions opened through the gate, least recently used first, each with its requests
    running. The SDK refuses every new session at its limit until one has idled out (after
    SESSION_IDLE_SECONDS), so the gate holds the number at MAX_SESSIONS itself: once a new one opens
    past it, the one idle longest is ended; its client gets 404 on its next request and opens
    another (as the protocol says)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.running: OrderedDict[str, int] = OrderedDict()

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Run one request through the app, counting it against the session it uses or opens."""
        asked = _header_values(scope["headers"], b"mcp-session-id")
        session = asked[0] if len(asked) == 1 and asked[0] in self.running else None
        if session is not None:
            self._begin(session)
        status = 0

        async def watch(message: dict[str, Any]) -> None:
            nonlocal session, status
            if message["type"] == "http.response.start":
                status = message["status"]
                opened = _header_values(message.get("headers", []), b"mcp-session-id")
                if not asked and status < 400 and len(opened) == 1 and opened[0] not in self.running:
                    session = opened[0]
                    self._begin(session)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if session in self.running:  # else ended meanwhile by another request
                self.running[session] -= 1
                self.running.move_to_end(session)
                if status == 404 or (scope["method"] == "DELETE" and status < 400):
                    del self.running[session]
        if session is not None and not asked:
            await self._make_room(scope, keep=session)

    def _begin(self, session: str) -> None:
        self.running[session] = self.running.get(session, 0) + 1
        self.running.move_to_end(session)

    async def _make_room(self, scope: dict[str, Any], keep: str) -> None:
        while len(self.running) > MAX_SESSIONS:
            idle = next((session for session, requests in self.running.items() if not requests and session != keep), None)
            if idle is None:  # all busy: they are at most MAX_CONCURRENT_REQUESTS, the SDK's limit has room for them
                return
            del self.running[idle]
            await _end_session(self.app, scope, idle)


async def _end_session(app: Any, scope: dict[str, Any], session: str) -> None:
    """End ``session`` as its client would, with a DELETE (the SDK's only public way), answered to no
    one; ``scope`` is a request's that reached the app."""
    request = {key: scope[key] for key in ("type", "asgi", "http_version", "scheme", "server", "client", "root_path") if key in scope}
    request.update(method="DELETE", path=ENDPOINT, raw_path=ENDPOINT.encode(), query_string=b"",
                   headers=[(b"mcp-session-id", session.encode("latin-1"))])
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def drop(message: dict[str, Any]) -> None:
        pass

    await app(request, receive, drop)


def _header_values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in headers if key == name]


async def _refuse(send: Any, status: int, message: str) -> None:
    """A plain-text refusal that also closes the connection: a refused client keeps no slot."""
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="docsearch"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": message.encode() + b"\n"})


def serve_http(server: Any, settings: HttpSettings, listening: socket.socket) -> None:
    """Serve ``server`` (an MCPServer) on ``listening`` until a stop signal. One server object,
    so all clients share the daemon's one index and writer."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    port = listening.getsockname()[1]
    # The gate checks Host and Origin (without case, and for any address); the SDK's own check is off.
    # The gate keeps the sessions at MAX_SESSIONS (Sessions); the SDK's limit only leaves room for
    # those opening while it makes room, one per request let through at most.
    app = server.streamable_http_app(
        streamable_http_path=ENDPOINT, host=settings.host, max_sessions=MAX_SESSIONS + MAX_CONCURRENT_REQUESTS,
        session_idle_timeout=SESSION_IDLE_SECONDS, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    owners = ConnectionOwners() if settings.token is None else None
    gate = Gate(app, own_hosts(settings, port), settings.token, _is_wildcard(settings.host), owners)
    config = uvicorn.Config(
        gate, log_config=None, access_log=False, server_header=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        http=_connection_protocol(owners), backlog=LISTEN_BACKLOG,
        proxy_headers=False,  # from loopback uvicorn would take the client's address from X-Forwarded-For
    )
    if not logger.isEnabledFor(logging.DEBUG):
        logging.getLogger("uvicorn").setLevel(logging.WARNING)  # its startup chatter; ours says where it listens
    for name in NOISY_LOGGERS:
        logging.getLogger(name).addFilter(_OncePerMinute())
    _raise_open_files_limit()
    who = "with a bearer token" if settings.token else "for your user only"
    logger.info("serving http://%s:%d%s (%s)", _in_url(settings.host), port, ENDPOINT, who)
    uvicorn.Server(config).run(sockets=[listening])


def _connection_protocol(owners: ConnectionOwners | None) -> type:
    """uvicorn's HTTP/1.1 protocol, which also:
    - answers 408 and closes a connection whose next request, head and body, has not all come within
      REQUEST_SECONDS of its opening or of its last response (uvicorn's own keep-alive timer
      restarts at every byte received, and nothing bounds a body: a byte now and then would hold a
      file descriptor and a request slot for ever);
    - without a token, judges each connection as it opens on its socket's owner: another user's
      request is answered 403 by the gate, within OTHER_USER_REQUEST_SECONDS;
    - closes gracefully, so that a client still sending reads its reply (see _LingeringTransport)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Connection(H11Protocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            self.request_deadline: Any = None
            super().connection_made(_LingeringTransport(transport, self.loop))
            allowed = owners is None or bool(self.client and self.server and owners.opened(self.client, self.server))
            self.request_seconds = REQUEST_SECONDS if allowed else OTHER_USER_REQUEST_SECONDS
            self.wait_for_request(after=None)

        def wait_for_request(self, after: Any) -> None:
            """Answer 408 (if one has begun) and close, unless the whole request after the one
            ``after`` (None: the first) has come within request_seconds."""
            def close_if_unfinished() -> None:
                cycle = self.cycle
                if self.transport.is_closing() or (cycle is not after and not cycle.more_body):
                    return
                begun = cycle is not after or self.conn.trailing_data[0]
                if begun and (cycle is after or not cycle.response_started):
                    _write_response(self.transport, 408, f"the request did not all come within {self.request_seconds} s")
                self.transport.close()

            self.request_deadline = self.loop.call_later(self.request_seconds, close_if_unfinished)

        def data_received(self, data: bytes) -> None:
            if not self.transport.lingering:  # else the reply is sent: what still comes is only drained
                super().data_received(data)

        def on_response_complete(self) -> None:
            finished = self.cycle
            super().on_response_complete()  # may begin a request already received (pipelined)
            self.request_deadline.cancel()
            self.wait_for_request(after=finished)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.request_deadline is not None:
                self.request_deadline.cancel()
            self.transport.lost()
            if owners is not None and self.client:
                owners.closed(self.client)
            super().connection_lost(exc)

    return Connection


class _LingeringTransport:
    """A connection's transport whose close() ends the connection so that the client reads the reply:
    our side first (FIN after the last byte written), then what the client still sends is read and
    dropped until it closes its side, for CLOSE_LINGER_SECONDS at most. A socket closed with bytes
    unread makes the kernel reset the connection, and a client still sending (a refused request's
    body, say) then loses the reply it had not read yet."""

    def __init__(self, transport: Any, loop: Any) -> None:
        self.transport = transport
        self.loop = loop
        self.lingering = False
        self.give_up: Any = None

    def __getattr__(self, name: str) -> Any:  # all else is the transport's own
        return getattr(self.transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self.transport.is_closing()

    def write(self, data: bytes) -> None:
        if not self.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.is_closing():
            return
        self.lingering = True
        self.transport.write_eof()
        self.transport.resume_reading()
        self.give_up = self.loop.call_later(CLOSE_LINGER_SECONDS, self.transport.abort)

    def lost(self) -> None:
        """The connection is gone."""
        if self.give_up is not None:
            self.give_up.cancel()


def _write_response(transport: Any, status: int, message: str) -> None:
    """A plain-text reply written as is, for when uvicorn has none under way (and the connection closes after it)."""
    body = message.encode() + b"\n"
    transport.write(
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
        % (status, HTTPStatus(status).phrase.encode(), len(body), body)
    )


class _OncePerMinute(logging.Filter):
    """A message from the same line at most once a minute. Out of file descriptors, asyncio logs a failed
    accept() once per waiting connection on every retry (hundreds of MB in minutes); uvicorn logs
    every malformed or upgrade request before the gate sees it; the SDK every session refused."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, float] = {}  # by the line that logs

    def filter(self, record: logging.LogRecord) -> bool:
        now, key = time.monotonic(), f"{record.pathname}:{record.lineno}"  # not the text: it may hold a session id
        if now - self.last.get(key, -60.0) < 60:
            return False
        self.last[key] = now
        return True


def _raise_open_files_limit() -> None:
    """Each connection holds a file descriptor: allow as many as the hard limit lets us."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard))
    except (ImportError, ValueError, OSError):
        pass  # not allowed here: the soft limit stays

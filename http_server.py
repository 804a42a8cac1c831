"""The MCP tools over Streamable HTTP: who may connect, and the HTTP server itself.

Loopback by default. Any other address needs ``--allow-remote`` and a bearer token, or the server
does not start. Every request passes a gate first (Gate):
- its ``Host``, and its ``Origin`` when a browser sends one, must name this server, so a web page
  cannot reach it by rebinding its own name to 127.0.0.1;
- with a token, it must carry ``Authorization: Bearer <token>``; without one (loopback only), it
  must come from the user who started the server, or root: other users of the machine cannot read
  your files through it. Linux tells which user owns the other end of a loopback connection
  (/proc/net/tcp); where that cannot be known, a token is required.

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
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
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
#: A connection that has not sent a whole request head by then is closed (uvicorn waits for ever).
REQUEST_HEAD_SECONDS = 10
#: Requests served at once, beyond which uvicorn answers 503; and MCP sessions open at once (each
#: holds memory until it ends or idles out).
MAX_CONCURRENT_REQUESTS = 200
MAX_SESSIONS = 500
LISTEN_BACKLOG = 128
#: The tables Linux lists TCP sockets in, with the user owning each.
PROC_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
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
    if token is None and not all(os.path.exists(table) for table in PROC_TCP_TABLES):
        raise ConfigError(
            "--token-file", "without a token only you may connect, and this system cannot tell which user a connection"
            f" comes from (no {PROC_TCP_TABLES[0]}): give a token with --token-file FILE or {TOKEN_ENV_VAR}"
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
    """The user owning the client's end of a TCP connection made on this machine (from Linux's
    /proc/net/tcp tables); None if it is not listed there. An IPv4 client may hold an IPv6 socket
    (IPv4-mapped), listed in tcp6."""
    wanted = {(PROC_TCP_TABLES[0], _proc_address(*client), _proc_address(*server))}
    if ipaddress.ip_address(client[0]).version == 4:
        wanted.add((PROC_TCP_TABLES[1], _proc_address(f"::ffff:{client[0]}", client[1]), _proc_address(f"::ffff:{server[0]}", server[1])))
    else:
        wanted = {(PROC_TCP_TABLES[1], _proc_address(*client), _proc_address(*server))}
    for table in PROC_TCP_TABLES:
        try:
            with open(table) as listing:
                next(listing, None)  # the column names
                for line in listing:
                    fields = line.split()
                    if (table, fields[1], fields[2]) in wanted:
                        return int(fields[7])
        except OSError:
            continue
    return None


def _proc_address(address: str, port: int) -> str:
    """An address as /proc/net/tcp writes it: each 32-bit word in the machine's byte order, in hex."""
    packed = ipaddress.ip_address(address).packed
    words = (int.from_bytes(packed[at:at + 4], sys.byteorder) for at in range(0, len(packed), 4))
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


class ConnectionOwners:
    """The user at the client end of each open connection, looked up once as it opens: reading
    /proc/net/tcp takes milliseconds (the kernel walks every socket), too long for every request.
    An entry goes when its connection closes, so a port used again is looked up again."""

    def __init__(self) -> None:
        self.owners: dict[tuple[str, int], int | None] = {}

    def opened(self, client: tuple[str, int], server: tuple[str, int]) -> None:
        self.owners[client] = peer_uid(client, server)

    def closed(self, client: tuple[str, int]) -> None:
        self.owners.pop(client, None)

    def owner(self, client: tuple[str, int], server: tuple[str, int]) -> int | None:
        return self.owners[client] if client in self.owners else peer_uid(client, server)


class Gate:
    """ASGI middleware in front of the MCP app: a request gets through only if its Host (and
    Origin, if any) name this server, and it carries the token, or, without a token, it comes
    from the user who started the server (or root)."""

    def __init__(self, app: Any, hosts: list[str], token: str | None, any_address: bool, owners: ConnectionOwners | None = None) -> None:
        self.app = app
        self.owners = owners or ConnectionOwners()
        self.hosts = frozenset(hosts)
        self.token = token.encode() if token is not None else None
        self.any_address = any_address  # bound to 0.0.0.0 or ::: the address a connection came to is ours too
        self.user = os.getuid()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope) if scope["type"] == "http" else (400, "only HTTP requests are served here")
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="docsearch"'))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": message.encode() + b"\n"})
        else:
            await send({"type": "websocket.close", "code": 1008})

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """Why this request is refused, as (HTTP status, message); None if it may go on."""
        host, origin, authorization = (_only_header(scope, name) for name in (b"host", b"origin", b"authorization"))
        hosts = self.hosts
        if self.any_address and scope.get("server"):
            hosts = hosts | {f"{_in_url(scope['server'][0])}:{scope['server'][1]}"}
        if host is None or host.lower() not in hosts:
            return 421, "the Host header does not name this server; if clients reach it by that name, start it with --allow-host NAME"
        if origin is not None and origin.lower() not in {f"{scheme}://{name}" for name in hosts for scheme in ("http", "https")}:
            return 403, "the Origin is not this server: web pages may not call it"
        if self.token is not None:
            scheme, _, given = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                return 401, "a bearer token is required: send the header Authorization: Bearer TOKEN"
            return None
        client, server = scope.get("client"), scope.get("server")
        owner = self.owners.owner(tuple(client), tuple(server)) if client and server else None
        if owner not in (self.user, 0):
            return 403, f"this server answers only the user who started it (uid {self.user}); or start it with a token"
        return None


def _only_header(scope: dict[str, Any], name: bytes) -> str | None:
    """A header's value; None if absent or sent more than once (which one a proxy passed on is not known)."""
    values = [value for key, value in scope["headers"] if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def serve_http(server: Any, settings: HttpSettings, listening: socket.socket) -> None:
    """Serve ``server`` (an MCPServer) on ``listening`` until a stop signal. One server object,
    so all clients share the daemon's one index and writer."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    port = listening.getsockname()[1]
    # The gate checks Host and Origin (without case, and for any address); the SDK's own check is off.
    app = server.streamable_http_app(
        streamable_http_path=ENDPOINT, host=settings.host, max_sessions=MAX_SESSIONS,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    owners = ConnectionOwners() if settings.token is None else None
    gate = Gate(app, own_hosts(settings, port), settings.token, _is_wildcard(settings.host), owners)
    config = uvicorn.Config(
        gate, log_config=None, access_log=False, server_header=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        http=_connection_protocol(owners), limit_concurrency=MAX_CONCURRENT_REQUESTS, backlog=LISTEN_BACKLOG,
    )
    if not logger.isEnabledFor(logging.DEBUG):
        logging.getLogger("uvicorn").setLevel(logging.WARNING)  # its startup chatter; ours says where it listens
    logging.getLogger("asyncio").addFilter(_OncePerMinute())
    _raise_open_files_limit()
    who = "with a bearer token" if settings.token else "for your user only"
    logger.info("serving http://%s:%d%s (%s)", _in_url(settings.host), port, ENDPOINT, who)
    uvicorn.Server(config).run(sockets=[listening])


def _connection_protocol(owners: ConnectionOwners | None) -> type:
    """uvicorn's HTTP/1.1 protocol, which also: closes a connection whose request head has not all
    come within REQUEST_HEAD_SECONDS (a client sending nothing, or a byte now and then, would
    otherwise hold a file descriptor for ever); and tells ``owners`` of each connection."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Connection(H11Protocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.head_deadline = self.loop.call_later(REQUEST_HEAD_SECONDS, self.close_if_no_request)
            if owners is not None and self.client and self.server:
                owners.opened(self.client, self.server)

        def close_if_no_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self.head_deadline.cancel()
            if owners is not None and self.client:
                owners.closed(self.client)
            super().connection_lost(exc)

    return Connection


class _OncePerMinute(logging.Filter):
    """The same asyncio error at most once a minute: out of file descriptors, accept() fails and is
    logged once per waiting connection on every retry (hundreds of MB of log in minutes)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now, key = time.monotonic(), str(record.msg)
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

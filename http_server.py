"""The MCP tools over Streamable HTTP: who may connect, and the HTTP server itself.

Loopback by default. Any other address needs ``--allow-remote`` and a bearer token, or the server
does not start. A token given on loopback is required too (without one, any local user of the
machine can connect). Every request's ``Host``, and its ``Origin`` when a browser sends one, must
name this server: a web page cannot reach it by rebinding its own name to 127.0.0.1.

Only ``serve --transport http`` imports this module's server part (uvicorn, the SDK's app).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
import stat
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
            raise ConfigError("--token-file", f"cannot open: {exc.strerror or exc}", origin) from None
        with os.fdopen(descriptor, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError("--token-file", "is not a regular file", origin)
            if info.st_mode & 0o077:
                raise ConfigError(
                    "--token-file", f"other users can read it (mode {stat.S_IMODE(info.st_mode):o}): chmod 600 {token_file}", origin
                )
            data = file.read(MAX_TOKEN_FILE_BYTES + 1)
        if len(data) > MAX_TOKEN_FILE_BYTES:
            raise ConfigError("--token-file", f"is larger than {MAX_TOKEN_FILE_BYTES} bytes: it should hold only the token", origin)
        return _checked_token(data.decode("utf-8", "replace"), origin)
    if environ.get(TOKEN_ENV_VAR):
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
    hosts = [f"{name}:{port}" for name in dict.fromkeys(names)]
    if port == 80:  # a client leaves the default port out of Host
        hosts += list(dict.fromkeys(names))
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
    try:
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        return socket.create_server((settings.host, settings.port), family=family)
    except (OSError, OverflowError) as exc:
        raise ConfigError("--host/--port", f"cannot listen on {settings.host}:{settings.port}: {getattr(exc, 'strerror', None) or exc}") from None


class BearerTokenRequired:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <the token>`` gets 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.authorized(scope):
            await send({
                "type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"www-authenticate", b'Bearer realm="docsearch"')],
            })
            await send({"type": "http.response.body", "body": b"a bearer token is required: send the header Authorization: Bearer TOKEN\n"})
            return
        await self.app(scope, receive, send)

    def authorized(self, scope: dict[str, Any]) -> bool:
        values = [value for name, value in scope["headers"] if name == b"authorization"]
        if len(values) != 1:
            return False
        scheme, _, given = values[0].partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)


def serve_http(server: Any, settings: HttpSettings, listening: socket.socket) -> None:
    """Serve ``server`` (an MCPServer) on ``listening`` until a stop signal. One server object,
    so all clients share the daemon's one index and writer."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    port = listening.getsockname()[1]
    hosts = own_hosts(settings, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts,
        allowed_origins=[f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")],
    )
    app = server.streamable_http_app(streamable_http_path=ENDPOINT, transport_security=security, host=settings.host)
    if settings.token is not None:
        app = BearerTokenRequired(app, settings.token)
    config = uvicorn.Config(
        app, log_config=None, access_log=False, server_header=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    if not logger.isEnabledFor(logging.DEBUG):
        logging.getLogger("uvicorn").setLevel(logging.WARNING)  # its startup chatter; ours says where it listens
    logger.info("serving http://%s:%d%s%s", _in_url(settings.host), port, ENDPOINT, "" if settings.token else " (no token: any local user can connect)")
    uvicorn.Server(config).run(sockets=[listening])

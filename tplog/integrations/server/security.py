"""Who may use the server, and from where (issue 37): a token (as Jupyter's), the user a request
is for (the tplog scope of everything it reads and writes), Host and Origin checks against DNS
rebinding and cross-site requests, and the security headers of every response.

:class:`Security` holds the options; :class:`SecureApp` is the Starlette app with the checks
outermost, so even a 500 carries the headers and every request runs with its user's scope
(:data:`request_scope`, read by the server's store accessors).
"""

from __future__ import annotations

import contextvars
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tplog.backends.live import LiveHeader, LiveStreams
from tplog.integrations.http import HTTPError, error_response
from tplog.integrations.server.config import ServeError

__all__ = [
    "CSP", "ENV_ALLOWED_HOSTS", "ENV_ALLOWED_ORIGINS", "ENV_AUTH_TOKEN", "ENV_AUTH_TOKEN_FILE", "ENV_AUTH_USERS",
    "ENV_AUTH_USERS_FILE", "ENV_TRUSTED_USER_HEADER", "TOKEN_COOKIE", "Authenticator", "ScopedLive", "SecureApp",
    "Security", "check_bind", "read_token_file", "read_users_file", "redact_access_log", "request_scope",
]

log = logging.getLogger("tplog.server")

#: The token every request but ``/health`` must carry (``Authorization: Bearer …``).
ENV_AUTH_TOKEN: Final = "TPLOG_SERVER_AUTH_TOKEN"
#: A file holding that token (its first line).
ENV_AUTH_TOKEN_FILE: Final = "TPLOG_SERVER_AUTH_TOKEN_FILE"
#: A JSON file ``{"USER": "TOKEN", …}``: each token authenticates its user, whose threads are a scope.
ENV_AUTH_USERS_FILE: Final = "TPLOG_SERVER_AUTH_USERS_FILE"
#: The same map as JSON text: how :func:`serve` hands a loaded map to its workers.
ENV_AUTH_USERS: Final = "TPLOG_SERVER_AUTH_USERS"
#: A header a trusted reverse proxy sets to the authenticated user (e.g. ``X-Forwarded-User``).
ENV_TRUSTED_USER_HEADER: Final = "TPLOG_SERVER_TRUSTED_USER_HEADER"
#: More Host names the server answers to, comma-separated (``*``: any).
ENV_ALLOWED_HOSTS: Final = "TPLOG_SERVER_ALLOWED_HOSTS"
#: More origins (``https://app.example``) allowed to send state-changing requests, comma-separated.
ENV_ALLOWED_ORIGINS: Final = "TPLOG_SERVER_ALLOWED_ORIGINS"

TOKEN_COOKIE: Final = "tplog_token"
#: Our own script, style, images and media only: no remote URL is fetched by the page, no framing.
CSP: Final = ("default-src 'self'; img-src 'self' data:; media-src 'self' data:; object-src 'none'; "
              "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_HEADERS: Final = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                   (b"referrer-policy", b"no-referrer")]
_LOCAL_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_MIN_TOKEN: Final = 16

#: The user (tplog scope) of the request being handled; None: the unscoped store.
request_scope: contextvars.ContextVar[str | None] = contextvars.ContextVar("tplog_request_scope", default=None)

#: A request -> its user id (the scope of what it reads and writes), or None to refuse it (401).
Authenticator = Callable[[Request], "str | None"]


@dataclass(frozen=True, kw_only=True)
class Security:
    """The server's access options. The default: no authentication (fit for loopback only),
    Host and Origin checks on.

    ``token``: every request but ``/health`` needs ``Authorization: Bearer TOKEN`` (or the cookie
    the page gets from ``/?token=TOKEN``). ``users``: user id -> token; a token authenticates its
    user. ``user_header``: the user is the value of this header, set by a trusted reverse proxy
    (with ``token`` too, only requests carrying the token are believed). ``authenticator``: your own
    request -> user id. A user id, by whichever of the last three, is the tplog scope of the
    request: each user sees only their own threads. ``allowed_hosts``: Host names answered besides
    the address the connection came to, ``localhost``, ``127.0.0.1`` and ``[::1]`` (``*``: any);
    ``allowed_origins``: origins besides the server's own allowed to send POSTs.
    """

    token: str | None = None
    users: Mapping[str, str] | None = None
    user_header: str | None = None
    authenticator: Authenticator | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    _by_token: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < _MIN_TOKEN:
            raise ServeError(f"the auth token must be at least {_MIN_TOKEN} characters (it is {len(self.token)}); "
                             "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
        sources = [n for n, v in (("users", self.users), ("user_header", self.user_header),
                                  ("authenticator", self.authenticator)) if v]
        if len(sources) > 1:
            raise ServeError(f"give one source of user ids, not {' and '.join(sources)}")
        if self.users is not None and self.token is not None:
            raise ServeError("give a token or a users file, not both (each user has a token of their own)")
        for user, tok in (self.users or {}).items():
            if not isinstance(user, str) or not user or len(user.encode()) > 256:
                raise ServeError(f"users: user id {user!r} must be a non-empty string of at most 256 bytes")
            if not isinstance(tok, str) or len(tok) < _MIN_TOKEN:
                raise ServeError(f"users: the token of {user!r} must be a string of at least {_MIN_TOKEN} characters")
            if tok in self._by_token:
                raise ServeError(f"users: {user!r} and {self._by_token[tok]!r} have the same token")
            self._by_token[tok] = user
        if self.user_header is not None and not re.fullmatch(r"[A-Za-z0-9-]+", self.user_header):
            raise ServeError(f"the trusted user header must be a header name, not {self.user_header!r}")
        for o in self.allowed_origins:
            if not re.fullmatch(r"https?://[^/\s]+", o):
                raise ServeError(f"an allowed origin is scheme://host[:port] (no path), not {o!r}")
        object.__setattr__(self, "allowed_hosts", tuple(h.lower() for h in self.allowed_hosts))
        object.__setattr__(self, "allowed_origins", tuple(o.lower() for o in self.allowed_origins))

    @property
    def authenticates(self) -> bool:
        """Whether a request must prove who sends it (a token, or your authenticator)."""
        return bool(self.token or self.users or self.authenticator)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Security:
        """The options the ``TPLOG_SERVER_*`` variables above give (what :func:`app_from_env` reads)."""
        token = environ.get(ENV_AUTH_TOKEN) or None
        if token is None and environ.get(ENV_AUTH_TOKEN_FILE):
            token = read_token_file(environ[ENV_AUTH_TOKEN_FILE])
        users: dict[str, str] | None = None
        if environ.get(ENV_AUTH_USERS):
            try:
                users = _users(json.loads(environ[ENV_AUTH_USERS]), ENV_AUTH_USERS)
            except ValueError:
                raise ServeError(f"{ENV_AUTH_USERS}: not JSON") from None
        elif environ.get(ENV_AUTH_USERS_FILE):
            users = read_users_file(environ[ENV_AUTH_USERS_FILE])
        return cls(token=token, users=users, user_header=environ.get(ENV_TRUSTED_USER_HEADER) or None,
                   allowed_hosts=_csv(environ.get(ENV_ALLOWED_HOSTS)),
                   allowed_origins=_csv(environ.get(ENV_ALLOWED_ORIGINS)))

    def to_env(self) -> dict[str, str]:
        """The variables :meth:`from_env` reads back (the workers of :func:`serve` inherit them)."""
        if self.authenticator is not None:
            raise ServeError("an authenticator function cannot be passed to worker processes: use create_app")
        env = {ENV_ALLOWED_HOSTS: ",".join(self.allowed_hosts), ENV_ALLOWED_ORIGINS: ",".join(self.allowed_origins),
               ENV_TRUSTED_USER_HEADER: self.user_header or "", ENV_AUTH_TOKEN: self.token or "",
               ENV_AUTH_USERS: json.dumps(dict(self.users)) if self.users else "", ENV_AUTH_TOKEN_FILE: "",
               ENV_AUTH_USERS_FILE: ""}
        return env


def _csv(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def read_token_file(path: str) -> str:
    """The token in ``path`` (its first line, stripped); :class:`ServeError` naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(f"auth token file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from exc
    if not token:
        raise ServeError(f"auth token file {path}: it is empty")
    return token


def read_users_file(path: str) -> dict[str, str]:
    """The ``{"USER": "TOKEN"}`` map in ``path``; :class:`ServeError` naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(f"auth users file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from exc
    except ValueError as exc:
        raise ServeError(f"auth users file {path}: not JSON (line {getattr(exc, 'lineno', '?')})") from exc
    return _users(data, path)


def _users(data: Any, where: str) -> dict[str, str]:
    if not isinstance(data, dict) or not data:
        raise ServeError(f"auth users {where}: expected a JSON object {{\"USER\": \"TOKEN\", …}} with one user or more")
    return data


def _is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (a name is looked up)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def check_bind(host: str, security: Security, allow_unauthenticated: bool) -> None:
    """Refuse to listen beyond loopback without authentication (a trusted header alone is none:
    whoever reaches the port can set it), unless ``allow_unauthenticated``."""
    if _is_loopback(host) or security.authenticates:
        return
    if not allow_unauthenticated:
        raise ServeError(
            f"refusing to listen on {host} without authentication: anyone who can reach the port could read every "
            "thread and run the agents. Give --auth-token-file FILE (or TPLOG_SERVER_AUTH_TOKEN) or "
            "--auth-users-file FILE; or --allow-unauthenticated if something in front of the server authenticates")
    log.warning("listening on %s without authentication (--allow-unauthenticated): anyone who can reach the port "
                "can read every thread and run the agents", host)


# --------------------------------------------------------------------------- live table per user


def live_key(scope: str, thread_id: str) -> str:
    """``thread_id``'s key in the live table for ``scope``: length-prefixed, so no scope's keys are another's."""
    return f"{len(scope)}:{scope}:{thread_id}"


class ScopedLive:
    """A user's view of the live table (in-flight stream chunks): its keys carry the scope, so the
    same thread id in two scopes is two streams."""

    def __init__(self, live: LiveStreams, scope: str) -> None:
        self.inner = live
        self.prefix = live_key(scope, "")

    def write(self, thread_id: str, turn_seq: int, batches: list[bytes], *, done: bool = False,
              attached: bool = True, owner: str = "") -> LiveHeader:
        return self.inner.write(self.prefix + thread_id, turn_seq, batches, done=done, attached=attached, owner=owner)

    def read(self, thread_id: str, *, after: int = 0, limit: int | None = None) -> tuple[LiveHeader | None,
                                                                                          list[bytes]]:
        return self.inner.read(self.prefix + thread_id, after=after, limit=limit)

    def request_stop(self, thread_id: str, turn_seq: int) -> bool:
        return self.inner.request_stop(self.prefix + thread_id, turn_seq)

    def expire(self, thread_id: str, turn_seq: int) -> None:
        self.inner.expire(self.prefix + thread_id, turn_seq)

    def sweep(self, *, done_before: int, stale_before: int) -> int:
        return self.inner.sweep(done_before=done_before, stale_before=stale_before)


# --------------------------------------------------------------------------- the checks


def _host_name(host: str) -> str:
    """``Host`` without its port, lower case (``[::1]:8000`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _same_site_path(path: str) -> str:
    """A redirect target on this server only (``//evil.example`` would leave it)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


class _Denied(Exception):
    def __init__(self, err: HTTPError, headers: Mapping[str, str] | None = None) -> None:
        self.err = err
        self.headers = headers or {}


class _Checks:
    """One request's checks, in order: Host, then (all but ``/health``) who, then cross-site."""

    def __init__(self, sec: Security) -> None:
        self.sec = sec

    def host(self, scope: Scope, headers: Headers) -> None:
        name = _host_name(headers.get("host", ""))
        server = scope.get("server")
        own = _host_name(f"[{server[0]}]" if server and ":" in str(server[0]) else str(server[0])) if server else ""
        if name in _LOCAL_HOSTS or name == own or name in self.sec.allowed_hosts or "*" in self.sec.allowed_hosts:
            return
        raise _Denied(HTTPError(421, "host_not_allowed", f"this server does not answer to Host {name!r}; start it "
                                "with --allowed-host NAME to allow that name"))

    def user(self, request: Request) -> tuple[str | None, str | None]:
        """(the user id or None for the unscoped store, the login token to set as a cookie or None)."""
        sec = self.sec
        user: str | None = None
        login: str | None = None
        if sec.token or sec.users:
            login = request.query_params.get("token") if request.method == "GET" else None
            cred = login or _bearer(request.headers.get("authorization")) or request.cookies.get(TOKEN_COOKIE)
            if not cred:
                raise _unauthorized("this server needs a token: send Authorization: Bearer TOKEN, or open the page "
                                    "once at /?token=TOKEN")
            if sec.token is not None:
                if not hmac.compare_digest(cred.encode(), sec.token.encode()):
                    raise _unauthorized("the token is not this server's")
            else:
                user = _user_of(sec._by_token, cred)
                if user is None:
                    raise _unauthorized("the token is no user's")
                site = request.headers.get("sec-fetch-site")
                if login and site in ("cross-site", "same-site"):  # another site logging you in as its user
                    raise _Denied(HTTPError(403, "cross_site_login", "a login link followed from another site is "
                                            "refused: open it directly (paste it in the address bar)"))
        if sec.user_header is not None:
            user = request.headers.get(sec.user_header)
            if not user:
                raise _unauthorized(f"no user: the {sec.user_header} header (set by the proxy in front) is missing")
        elif sec.authenticator is not None:
            try:
                user = sec.authenticator(request)
            except Exception as exc:
                log.error("the authenticator raised %s", type(exc).__name__, exc_info=exc)
                raise _Denied(HTTPError(500, "internal_error", "the authentication failed; see the server's log")) \
                    from None
            if not user:
                raise _unauthorized("not authenticated")
        if user is not None and (not isinstance(user, str) or len(user.encode()) > 256):
            raise _unauthorized("the user id must be a string of at most 256 bytes")
        return user, login

    def cross_site(self, request: Request) -> None:
        if request.method in _SAFE_METHODS:
            return
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            # text/plain, forms and bodies without a type are what a web page can send without asking
            raise _Denied(HTTPError(415, "unsupported_media_type", f"{request.method} needs Content-Type: "
                                    f"application/json, not {ctype or 'none'!r}"))
        origin = request.headers.get("origin")
        if origin is None:
            return
        o = origin.strip().lower()
        # the server's own host, any port (a dev server's proxy, as Vite's, sends its own Host);
        # for a loopback one any loopback name (the page at localhost, the proxy to 127.0.0.1)
        theirs, ours = _host_name(urlsplit(o).netloc) if "://" in o else "", _host_name(request.headers.get("host", ""))
        own = bool(theirs) and (theirs == ours or {theirs, ours} <= _LOCAL_HOSTS)
        if not own and o not in self.sec.allowed_origins:
            raise _Denied(HTTPError(403, "origin_not_allowed", f"requests from origin {origin!r} are refused; start "
                                    "the server with --allowed-origin ORIGIN to allow it"))


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    kind, _, cred = value.strip().partition(" ")
    return cred.strip() or None if kind.lower() == "bearer" else None


def _user_of(by_token: Mapping[str, str], cred: str) -> str | None:
    """The user whose token ``cred`` is, comparing with every token in constant time."""
    found = None
    for tok, user in by_token.items():
        if hmac.compare_digest(cred.encode(), tok.encode()):
            found = user
    return found


def _unauthorized(message: str) -> _Denied:
    return _Denied(HTTPError(401, "unauthorized", message), {"www-authenticate": 'Bearer realm="tplog"'})


class SecureApp(Starlette):
    """The app with :class:`Security`'s checks and headers around everything else (even the 500
    handler), each request run with its user's :data:`request_scope`."""

    def __init__(self, security: Security, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.security = security
        self._checks = _Checks(security)

    def build_middleware_stack(self) -> ASGIApp:
        inner = super().build_middleware_stack()
        checks = self._checks

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    have = {k.lower() for k, _ in message.get("headers", [])}
                    message["headers"] = [*message.get("headers", []), *(h for h in _HEADERS if h[0] not in have)]
                await send(message)

            request = Request(scope)
            try:
                checks.host(scope, request.headers)
                user, login = (None, None) if scope["path"] == "/health" else checks.user(request)
                if login is not None:
                    await _login(request, login)(scope, receive, send_with_headers)
                    return
                checks.cross_site(request)
            except _Denied as denied:
                resp = error_response(denied.err)
                resp.headers.update(denied.headers)
                await resp(scope, receive, send_with_headers)
                return
            reset = request_scope.set(user)
            try:
                await inner(scope, receive, send_with_headers)
            finally:
                request_scope.reset(reset)

        return app


def _login(request: Request, token: str) -> Response:
    """``GET …?token=T``: keep the token in a cookie the page's own requests carry (never another
    site's), then the same URL without it, so it is not left in the address bar or the history."""
    rest = urlencode([(k, v) for k, v in parse_qsl(request.url.query, keep_blank_values=True) if k != "token"])
    resp = Response(status_code=303, headers={"location": _same_site_path(request.url.path) + ("?" + rest if rest
                                                                                                else "")})
    resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                    path="/")
    return resp


class _RedactToken(logging.Filter):
    """Access log lines show ``?token=…`` as ``?token=[redacted]``."""

    _RE = re.compile(r"([?&]token=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self._RE.sub(r"\1[redacted]", a) if isinstance(a, str) else a for a in record.args)
        return True


_REDACT = _RedactToken()


def redact_access_log() -> None:
    """Keep tokens out of uvicorn's access log (idempotent: one filter however many apps)."""
    logging.getLogger("uvicorn.access").addFilter(_REDACT)

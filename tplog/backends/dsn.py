"""A store URL or PostgreSQL connection string as it may be shown (:func:`redact`): in errors, logs,
reprs and the CLI's output, never with a password in it. Pure text work: no driver needed."""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

__all__ = ["SECRET_PARAMS", "redact", "scrub"]

#: libpq's parameters whose values are secrets (``passfile``, ``sslkey``... name files, not secrets).
SECRET_PARAMS: Final = frozenset({"password", "sslpassword"})

# key = value pairs of a libpq conninfo string: a value is 'quoted' (with \' and \\ escapes) or a bare word.
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)")


def redact(target: str) -> str:
    """``target`` with every secret replaced by ``***``: the password of a URL's userinfo
    (``postgresql://user:***@host``), the ``password`` / ``sslpassword`` query parameters, and
    those pairs of a ``key=value`` conninfo string. Anything else is returned as it is."""
    out, _ = _split(target)
    return out


def scrub(message: str, target: str) -> str:
    """A driver's ``message`` about ``target`` with the secrets of ``target`` in it replaced by ``***``
    (libpq quotes the token it could not parse, which may be a password)."""
    _, secrets = _split(target)
    for value in sorted(secrets | {urllib.parse.unquote_plus(v) for v in secrets}, key=len, reverse=True):
        if value:
            message = message.replace(value, "***")
    return message


def _split(target: str) -> tuple[str, set[str]]:
    """``target`` redacted, and the secret values taken out of it."""
    secrets: set[str] = set()
    if "://" not in target:
        if "=" not in target:
            return target, secrets  # a directory, memory:, ...

        def pair(mt: re.Match[str]) -> str:
            if mt[1].lower() not in SECRET_PARAMS:
                return mt[0]
            secrets.add(mt[3].strip("'"))
            return f"{mt[1]}{mt[2]}***"

        return _PAIR.sub(pair, target), secrets
    scheme, _, rest = target.partition("://")
    head, q, query = rest.partition("?")
    user, at, hosts = head.rpartition("@")  # the last '@' and the first ':': a password may hold both, and '/'
    if at and ":" in user:
        name, _, password = user.partition(":")
        secrets.add(password)
        head = f"{name}:***@{hosts}"
    if q:
        query, h, fragment = query.partition("#")
        pairs = []
        for p in query.split("&"):
            key, eq, value = p.partition("=")
            if eq and urllib.parse.unquote_plus(key).lower() in SECRET_PARAMS:
                secrets.add(value)
                p = f"{key}=***"
            pairs.append(p)
        query = "&".join(pairs) + h + fragment
    return f"{scheme}://{head}{q}{query}", secrets

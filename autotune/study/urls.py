"""A storage URL as it may be shown: its passwords masked, and a driver's message scrubbed of them.

A ``--storage`` URL can carry credentials (``postgresql://user:password@host/db``, ``?password=...``), and
it appears in messages, in reports and in exceptions a database driver raises. Everything that shows one
goes through :func:`display_url`; a driver's own error text goes through :func:`scrub`, since a driver may
quote the password it was given. Both work on the text as written, so a URL that SQLAlchemy cannot parse
(the message about a bad URL must still name it) is shown without what it contains.
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import unquote_plus

import sqlalchemy.exc
from sqlalchemy.engine import make_url

#: ``scheme://user:password@host...``: the password runs to the last ``@`` that is followed by a host (a
#: password may contain ``@``, ``/`` or ``:``; SQLAlchemy's parser stops at its first ``@`` and would show
#: the rest as the host).
_USERINFO = re.compile(r"(?P<head>[^:/?#]+://[^:/?#@]*:)(?P<password>.*)(?P<tail>@[^@/?#]*(?:[/?#].*)?)\Z", re.S)
#: Query-string keys whose values are secrets (``?password=``, ``sslpassword``, ``passwd``, ``pwd``, tokens).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.I)
_QUERY_SECRET = re.compile(r"(?P<key>[?&][^=&#]*)=(?P<value>[^&#]*)")


def display_url(url: str) -> str:
    """``url`` with its passwords masked, for messages and reports (a storage URL may carry credentials).

    Masked: the password after ``user:`` (also one containing ``@``) and the value of every query-string
    key that names a secret (``?password=...``). Done on the text as written, so a URL SQLAlchemy cannot
    parse is still shown (the message about a bad URL must name it) without what it contains.
    """
    text = str(url)
    m = _USERINFO.match(text)
    if m and m["password"]:
        text = f"{m['head']}***{m['tail']}"

    def mask(q: re.Match[str]) -> str:
        return f"{q['key']}=***" if _SECRET_KEY.search(q["key"]) and q["value"] else q[0]

    return _QUERY_SECRET.sub(mask, text)


def _secrets(url: str) -> set[str]:
    """Every password in ``url``, as written and %-decoded, and as SQLAlchemy parses it (a driver quotes that)."""
    found: set[str] = set()
    m = _USERINFO.match(url)
    if m:
        # and its pieces: a parser that splits the password at "@" or ":" quotes the rest ("invalid literal for
        # int(): 'w0rd@host'" for "p@ss:w0rd")
        password = m["password"]
        found |= {password, unquote_plus(password), *re.split(r"[@:/?#]", password)}
        found |= {piece for piece in re.split(r"[@:/?#]", unquote_plus(password))}
    for q in _QUERY_SECRET.finditer(url):
        if _SECRET_KEY.search(q["key"]):
            found |= {q["value"], unquote_plus(q["value"])}
    with contextlib.suppress(sqlalchemy.exc.ArgumentError, ValueError, TypeError):
        parsed = make_url(url)
        found.add(str(parsed.password or ""))
        if parsed.host and "@" in parsed.host:  # "user:p@ss@host": SQLAlchemy's host is "ss@host"
            found.add(parsed.host.rpartition("@")[0])
    return {s for s in found if s}


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message) without the passwords of ``url``, should the driver quote them.

    Only whole occurrences are masked (not inside a longer word): a short password must not mangle the
    rest of the message, e.g. "p" in "pg8000". Longer secrets first, so a part does not leave the rest.
    """
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text


URL_EXAMPLES = "sqlite:///path/study.db or postgresql+psycopg2://user:password@host:5432/db"

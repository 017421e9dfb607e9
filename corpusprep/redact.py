"""Credentials out of URLs before corpusprep writes or prints them.

`redact(url)` hides a URL's user:password and the values of query (and fragment) keys
that look like credentials: `https://u:pw@h/x?token=t&page=2` ->
`https://***@h/x?token=***&page=2`. Everything else is kept as written (no re-encoding),
so the redacted URL still says which file it was. `redact_text` does the same for every
URL inside a message; `redact_values` for every string in a JSON-like value.
"""

from __future__ import annotations

import re
from typing import Any

# keys whose values are secrets (compared in lower case): exact names, and any key holding
# one of the words (access_token, client_secret, x-amz-signature, x-amz-credential, ...)
SECRET_KEYS = {"token", "key", "api_key", "apikey", "access_token", "sig", "signature",
               "password", "passwd", "pwd", "secret", "auth", "authorization", "x-amz-signature",
               "x-amz-credential", "x-amz-security-token"}  # fmt: skip
SECRET_WORDS = ("token", "secret", "password", "passwd", "signature", "credential", "apikey",
                "api_key")  # fmt: skip
MASK = "***"
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(:\d*)?")  # host, host:port, [::1]:port

# a URL in running text: a scheme, "://" (or Hydra's escaped "\://" in an override), then
# anything up to a space, a quote or a bracket, less the punctuation that ends a sentence
# ("could not download URL: HTTP 404")
_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*\\?://[^\s'"<>(){}]*[^\s'"<>(){}.,;:!?]""")


def is_secret_key(name: str) -> bool:
    key = name.strip().lower()
    return key in SECRET_KEYS or any(word in key for word in SECRET_WORDS)


def _params(text: str) -> str:
    """`a=1&token=x` -> `a=1&token=***` (';' separates too, as some servers read it)."""
    parts = re.split(r"([&;])", text)
    for i in range(0, len(parts), 2):
        name, eq, value = parts[i].partition("=")
        if eq and value and is_secret_key(_unquote(name)):
            parts[i] = f"{name}={MASK}"
    return "".join(parts)


def _unquote(text: str) -> str:
    from urllib.parse import unquote_plus

    return unquote_plus(text)


def _first(text: str, marks: str, start: int = 0) -> int:
    """Where the first of `marks` is in text (from start), or len(text)."""
    found = [i for i in (text.find(m, start) for m in marks) if i != -1]
    return min(found, default=len(text))


def redact(url: Any) -> str:
    """The URL without its credentials: userinfo -> `***@`, secret query values -> `***`."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    end = _first(rest, "/?#")  # the authority ends at the first / ? or #
    if "@" not in rest[:end] and not _HOST_PORT.fullmatch(rest[:end]):
        # "user:pa/ss@host/x" is no valid authority, but holds a password all the same
        at = rest.rfind("@", 0, _first(rest, "?#"))
        end = end if at == -1 else _first(rest, "/?#", at)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{MASK}@{authority.rsplit('@', 1)[1]}"
    tail, hash_, fragment = tail.partition("#")
    path, q, query = tail.partition("?")
    return (f"{scheme}://{authority}{path}" + (f"?{_params(query)}" if q else "")
            + (f"#{_params(fragment)}" if hash_ else ""))  # fmt: skip


def redact_text(text: Any) -> str:
    """Every URL in `text` redacted (error messages, folder names, files Hydra wrote)."""
    return _URL.sub(lambda m: redact(m.group(0)), str(text))


def redact_values(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings...) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_values(v) for v in value]
    return value

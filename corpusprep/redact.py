"""Credentials out of URLs, and secret headers, before corpusprep writes or prints them.

`redact(url)` hides a URL's user:password and the values of query (and fragment) keys
that look like credentials: `https://u:pw@h/x?token=t&page=2` ->
`https://***@h/x?token=***&page=2`. Everything else is kept as written (no re-encoding),
so the redacted URL still says which file it was. `redact_text` does the same for every
URL inside a message, and hides what follows a secret's name (`Authorization: ***`,
`+source.headers.X-Api-Key=***`); `redact_values` for every string in a JSON-like value,
and every string under a secret's name.
"""

from __future__ import annotations

import io
import re
from functools import lru_cache
from typing import Any, TextIO

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
# It ends before a comma that starts another override or URL (Hydra joins a job's overrides
# with commas: "source.url=http://h/x,+source.headers.X-Api-Key=...").
_NEXT = r",(?=[+~]*[A-Za-z0-9_.-]+=|[A-Za-z][A-Za-z0-9+.-]*\\?://)"
# A user:password before an "@" is the URL's whatever it holds: a password may have ' ( )
# in it, unencoded, where the rest of a URL in a message would end
_USERINFO = r"(?:[^\s/?#@]*@)?"
_URL = re.compile(
    rf"""[A-Za-z][A-Za-z0-9+.-]*\\?://{_USERINFO}(?:(?!{_NEXT})[^\s'"<>(){{}}])*(?<![.,;:!?])"""
)


# words of a config key or header name that say it holds a secret (Authorization,
# X-Api-Key, hf_token, authToken, client_secret); matched as whole words (camelCase split),
# so tokenizer and shard_tokens are not
SECRET_NAME_WORDS = {"token", "secret", "password", "passwd", "pwd", "signature",
                     "credential", "credentials", "apikey", "auth", "authorization",
                     "authentication", "cookie", "bearer"}  # fmt: skip
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


# a "token" after one of these is a tokenizer's or a measure's, not a credential
NOT_SECRET_TOKEN = {"per", "bos", "eos", "eot", "pad", "unk", "sep", "cls", "mask", "special",
                    "max", "min", "num", "first", "last", "start", "end"}  # fmt: skip


# names that end in "key" and hold none: where OmegaConf's and Hydra's messages say which
# config key they are about ("full_key: source.nope")
NOT_SECRET_KEYS = {"full_key", "fullkey", "parent_key", "dict_key", "sort_key"}


@lru_cache(maxsize=4096)  # a manifest asks of the same few keys for each of its input files
def is_secret_name(name: str) -> bool:
    """Whether a config key or HTTP header of this name holds a secret."""
    if name.lower() in NOT_SECRET_KEYS:
        return False
    words = [w.lower() for w in _WORDS.findall(name)]
    joined = "".join(words)
    secret = [
        w in SECRET_NAME_WORDS and not (w == "token" and i and words[i - 1] in NOT_SECRET_TOKEN)
        for i, w in enumerate(words)
    ]
    return (any(secret) or "apikey" in joined
            or "accesskey" in joined or "privatekey" in joined
            or (len(words) > 1 and words[-1] == "key"))  # Ocp-Apim-Subscription-Key  # fmt: skip


# `name=value` or `name: value` (an override, a YAML line, a flow mapping); not a URL's
# scheme. The value runs to the end of the line, to a ": " (where a message goes on), or
# to a , } ] that ends the text or is followed by another name= / name: (a value may
# hold a comma: "Bearer a,b")
_NAME = re.compile(r"([A-Za-z0-9_.~+-]+)((?:=|:(?!//))[ \t]*)")  # "token = f()" is code
_VALUE_END = re.compile(
    r"\r|\n|:[ \t]|[,}\]](?=[ \t]*(?:$|[\r\n,}\]]|[+~]*[A-Za-z0-9_.-]+[ \t]*(?:=|:(?!//))))"
)
SANITIZED = "_"  # MASK as a folder name has it (config._safe): already hidden


def _redact_pairs(text: str) -> str:
    out, at = [], 0
    for m in _NAME.finditer(text):
        if m.start() < at or not is_secret_name(m.group(1).rsplit(".", 1)[-1]):
            continue
        if m.group(2)[0] == ":" and text[m.start() - 1 : m.start()] in ("/", "\\"):
            continue  # a path's last name, then a message: "/etc/passwd: no such file"
        end = _VALUE_END.search(text, m.end())
        end = len(text) if end is None else end.start()
        if text[m.end() : end].strip() not in ("", MASK, SANITIZED):
            out += [text[at : m.end()], MASK]
            at = end
    return "".join(out) + text[at:]


def redact_override(arg: str) -> str:
    """One command-line override: a secret's whole value hidden (`KEY=***`, whatever it
    holds: commas, quotes), else as redact_text."""
    key, eq, value = str(arg).partition("=")
    if eq and value and is_secret_name(key.lstrip("+~").rsplit(".", 1)[-1]):
        return f"{key}={MASK}"
    return redact_text(arg)


def is_secret_key(name: str) -> bool:
    """Whether a URL's query (or fragment) key holds a secret: the names URLs use, and any
    a header or config key of that name would be hidden for (api-key, access_key, ...)."""
    key = name.strip().lower()
    return key in SECRET_KEYS or any(word in key for word in SECRET_WORDS) or is_secret_name(name)


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
    """Every URL in `text` redacted, and every value written under a secret's name
    (error messages, folder names, overrides, files Hydra wrote)."""
    text = str(text)
    if "=" not in text and ":" not in text:  # no name=value, no URL: nothing to look for
        return text  # (a manifest lists every input file's path: 200,000 of them, fast)
    return redact_urls_and_pairs(text)


def redact_urls_and_pairs(text: str) -> str:
    """redact_text(), the whole search."""
    out, at = [], 0
    for m in _URL.finditer(text):  # a URL's own query keys are redact()'s
        out += [_redact_pairs(text[at : m.start()]), redact(m.group(0))]
        at = m.end()
    return "".join(out) + _redact_pairs(text[at:])


def redact_values(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings...) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):  # a header's or key's secret value: hidden whole
        return {k: MASK if _is_value(v) and is_secret_name(str(k)) else redact_values(v)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, (list, tuple)):
        return [redact_values(v) for v in value]
    return value


def _is_value(v: Any) -> bool:
    """A secret's value to hide: a string or a number (X-Api-Key=12345678 is read as one)."""
    return isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != ""


class RedactedLines(io.TextIOBase):
    """A text stream that writes each line redact_text'ed to the stream under it (Hydra's
    --cfg, --info and --help print the config as written, a config file's secrets too).
    A reader that went away (`| head`) ends the output, as for print, not the command."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self._line, self._gone = stream, "", False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._line = (self._line + text).split("\n")
        self._send("".join(redact_text(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._line:
            self._send(redact_text(self._line))
            self._line = ""
        self._send("", flush=True)

    def _send(self, text: str, flush: bool = False) -> None:
        if self._gone:
            return
        try:
            if text:
                self.stream.write(text)
            if flush:
                self.stream.flush()
        except BrokenPipeError:
            self._gone = True

    def isatty(self) -> bool:
        return self.stream.isatty()

"""source=url against servers that break the rules: odd Content-Length values, an empty
body, a Content-Encoding the run did not ask for, and redirects to another host (which must
not receive the headers the user gave). Servers on 127.0.0.1 and 127.0.0.2 only."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from helpers import LocalHTTPServer, assert_one_line_error, run_cli

from corpusprep.errors import UserError
from corpusprep.sources.url import UrlSource

TEXT = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 400
CUT_GZIP = gzip.compress(TEXT)[: len(gzip.compress(TEXT)) // 2]
_raw = zlib.compressobj(wbits=-15)
RAW_DEFLATE = _raw.compress(TEXT) + _raw.flush()  # no zlib header: as some servers send it
PAGE = b"<!DOCTYPE html>\n<html><body><h1>429 Too Many Requests</h1></body></html>\n"


class Server(LocalHTTPServer):
    """Answers each path as ANSWERS says, and keeps the headers of every request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.redirects: dict[str, str] = {}
        super().__init__(_handler_for, host)

    def url(self, path: str) -> str:
        return f"{self.root}{path}"


def _answer(path: str) -> tuple[dict[str, str], bytes]:
    """(headers, body) for a path; Content-Length is len(body) unless a header says other."""
    length = str(len(TEXT))
    answers = {
        "/input.txt": ({}, TEXT),
        # HTTP/1.0 with no length: the body ends where the connection does, cut or not
        "/no-length.txt": ({"Content-Length": None}, TEXT),
        "/no-length-cut.txt": ({"Content-Length": None}, TEXT[: len(TEXT) // 2]),
        # chunked in the list but not alone: http.client does not unchunk it, and reads the
        # body to the connection's end, unframed
        "/not-only-chunked.txt": (
            {"Content-Length": None, "Transfer-Encoding": "gzip, chunked"},
            TEXT,
        ),
        "/same-twice.txt": ({"Content-Length": f"{length}, {length}"}, TEXT),
        "/spaced.txt": ({"Content-Length": f" {length} "}, TEXT),
        "/two-lengths.txt": ({"Content-Length": f"{length}, 7"}, TEXT),
        "/garbage-length.txt": ({"Content-Length": "abc"}, TEXT),
        "/hex-length.txt": ({"Content-Length": hex(len(TEXT))}, TEXT),
        "/long-length.txt": ({"Content-Length": "9" * 5000}, TEXT),
        # gzip cut halfway: no Content-Length (the connection's end is the body's end), or
        # one that counts the cut body
        "/cut-gzip.txt": ({"Content-Encoding": "gzip", "Content-Length": None}, CUT_GZIP),
        "/cut-gzip-counted.txt": ({"Content-Encoding": "gzip"}, CUT_GZIP),
        "/two-members.txt": (
            {"Content-Encoding": "gzip"},
            gzip.compress(TEXT[:999]) + gzip.compress(TEXT[999:]),
        ),
        "/raw-deflate.txt": ({"Content-Encoding": "deflate"}, RAW_DEFLATE),
        "/gzip-identity.txt": ({"Content-Encoding": "gzip, identity"}, gzip.compress(TEXT)),
        "/zero-padded.txt": ({"Content-Encoding": "gzip"}, gzip.compress(TEXT) + b"\0" * 16),
        "/empty-gzip.txt": ({"Content-Encoding": "gzip"}, b""),
        "/input.txt.zst": ({"Content-Encoding": "zstd"}, b"(\xb5/\xfd not really zstd"),
        "/empty.txt": ({}, b""),
        # a web page where the file should be: an error page, or GitHub's page of a file
        "/page.txt": ({"Content-Type": "text/html; charset=utf-8"}, PAGE),
        "/page.html": ({"Content-Type": "text/html"}, PAGE),
        "/gzip.txt": ({"Content-Encoding": "gzip"}, gzip.compress(TEXT)),
        "/deflate.txt": ({"Content-Encoding": "deflate"}, zlib.compress(TEXT)),
        "/br.txt": ({"Content-Encoding": "br"}, b"\x1b\x03\x00\xf8\xa5\x00"),
        # Apache's AddEncoding for .gz: the file is the .gz file, not its text
        "/input.txt.gz": ({"Content-Encoding": "gzip"}, gzip.compress(TEXT, mtime=0)),
    }
    return answers[path]


def _handler_for(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def do_GET(self) -> None:
            server.hit(self.path)
            server.seen.append((self.path, dict(self.headers.items())))
            if self.path in server.redirects:
                self.send_response(302)
                self.send_header("Location", server.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            try:
                headers, body = _answer(self.path)
            except KeyError:
                headers, body = {}, b"not found"
                self.send_response(404)
            else:
                self.send_response(200)
            headers = {"Content-Length": str(len(body)), "Connection": "close", **headers}
            for name, value in headers.items():
                if value is not None:
                    self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    return Handler


@pytest.fixture
def server():
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def other_host():
    srv = Server("127.0.0.2")
    try:
        yield srv
    finally:
        srv.stop()


pytestmark = pytest.mark.usefixtures("loopback_env")  # no proxy between us and them


def _source(url: str, cache_dir: Path, **kw) -> UrlSource:
    return UrlSource(url, cache_dir=str(cache_dir), timeout=10, retries=0, **kw)


def _cached(cache_dir: Path) -> list[str]:
    return sorted(p.name for p in cache_dir.iterdir()) if cache_dir.exists() else []


@pytest.mark.parametrize("path", ["/same-twice.txt", "/spaced.txt"])
def test_a_content_length_http_allows_is_read(path, server, cache_dir):
    """The same value repeated ('N, N', as a proxy may join two headers) is that value."""
    src = _source(server.url(path), cache_dir)
    assert src.local_path(progress=False).read_bytes() == TEXT


@pytest.mark.parametrize(
    "path", ["/two-lengths.txt", "/garbage-length.txt", "/hex-length.txt", "/long-length.txt"]
)
def test_an_invalid_content_length_is_one_line_and_caches_nothing(path, server, cache_dir):
    """RFC 9110: a length that cannot be read leaves the body's end unknown; no guess."""
    src = _source(server.url(path), cache_dir)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    message = str(e.value)
    assert server.url(path) in message and "Content-Length" in message
    assert "nothing was cached" in message and f"put the file at {src.cache_path()}" in message
    assert _cached(cache_dir) == []


@pytest.mark.parametrize("path", ["/empty.txt", "/empty-gzip.txt"])
def test_an_empty_body_is_not_cached(path, server, cache_dir):
    src = _source(server.url(path), cache_dir)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert "empty file" in str(e.value) and "nothing was cached" in str(e.value)
    assert _cached(cache_dir) == []


def test_an_empty_file_already_cached_says_how_to_download_again(server, cache_dir):
    src = _source(server.url("/input.txt"), cache_dir)
    cache_dir.mkdir(exist_ok=True)
    src.cache_path().write_bytes(b"")
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert "empty" in str(e.value) and f"delete it to download {src.url} again" in str(e.value)


def test_a_web_page_for_a_file_is_one_line_and_caches_nothing(server, cache_dir):
    """A 200 with an HTML page (an error page, GitHub's page of a file rather than the raw
    file) was cached and tokenized as the corpus, exit 0. It is refused, with the sha256
    that takes it anyway; a URL that names a page (.html) is read as ever."""
    url = server.url("/page.txt")
    with pytest.raises(UserError) as e:
        _source(url, cache_dir).local_path(progress=False)
    sha = hashlib.sha256(PAGE).hexdigest()
    said = str(e.value)
    assert url in said and "text/html" in said and "check source.url" in said
    assert f"source.sha256={sha}" in said
    assert _cached(cache_dir) == []
    assert _source(url, cache_dir, sha256=sha).local_path(progress=False).read_bytes() == PAGE
    page = _source(server.url("/page.html"), cache_dir).local_path(progress=False)
    assert page.read_bytes() == PAGE


@pytest.mark.parametrize("path", ["/gzip.txt", "/deflate.txt", "/two-members.txt",
                                  "/raw-deflate.txt", "/gzip-identity.txt",
                                  "/zero-padded.txt"])  # fmt: skip
def test_a_compressed_transfer_is_cached_as_the_file_itself(path, server, cache_dir):
    """A server that compresses although asked not to: the cache holds the file's own bytes,
    whose sha256 is the one a user pins."""
    src = _source(server.url(path), cache_dir, sha256=hashlib.sha256(TEXT).hexdigest())
    assert src.local_path(progress=False).read_bytes() == TEXT


def _deflated(data: bytes, wbits: int) -> bytes:
    stream = zlib.compressobj(wbits=wbits)
    return stream.compress(data) + stream.flush()


@pytest.mark.parametrize("wbits", [15, -15, 31], ids=["zlib", "raw", "gzip"])
def test_the_inflater_reads_every_whole_stream_and_no_cut_one(wbits):
    """Whole streams near the output's CHUNK, fed in pieces of any size (a first piece of
    one byte too): all read, and read whole; every cut stream is seen as cut."""
    import random

    from corpusprep.sources.url import CHUNK, _Inflate

    rng = random.Random(3)
    for size in (0, 1, 100, CHUNK - 1, CHUNK, CHUNK + 2, 3 * CHUNK + 7):
        text = bytes(rng.getrandbits(8) for _ in range(64)) * (size // 64) + b"x" * (size % 64)
        body = _deflated(text, wbits)
        pieces_of_997 = [body[i : i + 997] for i in range(0, len(body), 997)]
        for pieces in ([body], [body[:1], body[1:]], pieces_of_997):
            inflate = _Inflate(gzip=wbits == 31)
            out = b"".join(b"".join(inflate.feed(p)) for p in pieces)
            assert out == text and inflate.ended(), (size, wbits, len(pieces))
        for cut in sorted({1, len(body) // 2, len(body) - 1}):
            inflate = _Inflate(gzip=wbits == 31)
            try:
                b"".join(inflate.feed(body[:cut]))
            except Exception:  # a corrupt start (the cut left too little to tell): also refused
                continue
            assert not inflate.ended(), (size, wbits, cut)


@pytest.mark.parametrize("path", ["/cut-gzip.txt", "/cut-gzip-counted.txt"])
def test_a_compressed_transfer_cut_short_is_not_cached(path, server, cache_dir):
    """The compressed stream's own end (gzip's trailer) tells a whole transfer from a cut
    one, where no Content-Length can: retried, then one line, nothing cached."""
    src = UrlSource(server.url(path), cache_dir=str(cache_dir), timeout=10, retries=1)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert "ended before" in str(e.value) and "after 2 attempts" in str(e.value)
    assert server.count(path) == 2
    assert _cached(cache_dir) == []


@pytest.mark.parametrize("path", ["/input.txt.gz", "/input.txt.zst"])
def test_a_compressed_file_a_server_labels_by_its_name_stays_that_file(path, server, cache_dir):
    body = _answer(path)[1]
    src = _source(server.url(path), cache_dir, sha256=hashlib.sha256(body).hexdigest())
    assert src.local_path(progress=False).read_bytes() == body


def test_an_encoding_corpusprep_cannot_undo_is_one_line(server, cache_dir):
    src = _source(server.url("/br.txt"), cache_dir)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert "Content-Encoding: br" in str(e.value) and "nothing was cached" in str(e.value)
    assert _cached(cache_dir) == []


HEADERS = {"X-Api-Key": "SECRET-API-KEY", "Private-Token": "SECRET-TOKEN",
           "Authorization": "Bearer SECRET", "X-Trace": "not-a-secret"}  # fmt: skip


def test_headers_go_to_the_urls_own_host_only(server, other_host, cache_dir):
    """A redirect to another host (or port, or scheme) gets none of the headers the user
    gave: a key named in no list of secrets is as safe as Authorization. The same host's
    redirect keeps them."""
    server.redirects["/moved.txt"] = other_host.url("/input.txt")
    server.redirects["/here.txt"] = server.url("/input.txt")
    for path in ("/moved.txt", "/here.txt"):
        src = _source(server.url(path), cache_dir / path.strip("/"), headers=HEADERS)
        assert src.local_path(progress=False).read_bytes() == TEXT
    (first,) = [h for p, h in server.seen if p == "/moved.txt"]
    assert {k: first.get(k) for k in HEADERS} == HEADERS
    ((_, elsewhere),) = other_host.seen
    assert not set(elsewhere) & set(HEADERS), elsewhere
    (same,) = [h for p, h in server.seen if p == "/input.txt"]
    assert {k: same.get(k) for k in HEADERS} == HEADERS


@pytest.mark.parametrize("location", ["http://127.0.0.1:99999/x.txt", "http://127.0.0.1:abc/x"])
def test_a_redirect_to_a_url_with_a_bad_port_is_one_line(location, server, cache_dir):
    server.redirects["/bad-port.txt"] = location
    src = _source(server.url("/bad-port.txt"), cache_dir, headers=HEADERS)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert server.url("/bad-port.txt") in str(e.value)
    assert _cached(cache_dir) == []


@pytest.mark.parametrize(
    ("location", "said"),
    [("/loop.txt", "redirect"), ("ftp://127.0.0.1/x.txt", "ftp://127.0.0.1/x.txt")],
)
def test_a_redirect_no_retry_can_follow_is_one_line_and_not_retried(location, said, server,
                                                                     cache_dir):  # fmt: skip
    """A redirect loop, or a redirect to a scheme that is not http(s), was retried as a cut
    connection (source.retries times, with backoff) and then named by requests' class
    (TooManyRedirects, InvalidSchema) with a fix that does not fit."""
    server.redirects["/loop.txt"] = location
    src = UrlSource(server.url("/loop.txt"), cache_dir=str(cache_dir), timeout=10, retries=2)
    with pytest.raises(UserError) as e:
        src.local_path(progress=False)
    assert server.url("/loop.txt") in str(e.value)
    assert said in str(e.value) and "check source.url" in str(e.value)
    assert "attempts" not in str(e.value)
    assert server.count("/loop.txt") <= 31  # one attempt: requests follows 30 redirects
    assert _cached(cache_dir) == []


def test_headers_are_not_sent_back_after_a_detour(server, other_host, cache_dir):
    """Away and back to the URL's host: the headers stay dropped (the detour chose the
    way back)."""
    server.redirects["/away.txt"] = other_host.url("/back.txt")
    other_host.redirects["/back.txt"] = server.url("/input.txt")
    src = _source(server.url("/away.txt"), cache_dir, headers=HEADERS)
    assert src.local_path(progress=False).read_bytes() == TEXT
    (back,) = [h for p, h in server.seen if p == "/input.txt"]
    assert not set(back) & set(HEADERS)


def test_cli_an_invalid_content_length(server, cache_dir, tmp_path):
    result = run_cli("source=url", f"source.url={server.url('/garbage-length.txt')}",
                     f"out_dir={tmp_path}/out", "source.retries=0", "quiet=true", cwd=tmp_path,
                     env={"CORPUSPREP_CACHE_DIR": str(cache_dir)})  # fmt: skip
    assert_one_line_error(result, server.url("/garbage-length.txt"), "Content-Length 'abc'")
    assert _cached(cache_dir) == []


def test_a_download_of_no_stated_length_says_a_cut_cannot_be_told(server, cache_dir, capsys):
    """With no Content-Length, no chunked framing and no compressed stream, a connection cut
    short looks like the whole file: the download is kept (it may well be whole), and a
    warning says so and gives the pin that makes a later cut or change an error."""
    src = _source(server.url("/no-length.txt"), cache_dir)
    assert src.local_path(progress=False).read_bytes() == TEXT
    (line,) = capsys.readouterr().err.splitlines()
    digest = hashlib.sha256(TEXT).hexdigest()
    assert line.startswith("corpusprep: warning: ") and server.url("/no-length.txt") in line
    assert "no Content-Length" in line and f"source.sha256={digest}" in line, line
    pinned = _source(server.url("/no-length.txt"), cache_dir / "pinned", sha256=digest)
    assert pinned.local_path(progress=False).read_bytes() == TEXT
    assert capsys.readouterr().err == ""  # the pin checks it: nothing to warn of


def test_a_transfer_encoding_http_client_does_not_unchunk_is_warned_of(server, cache_dir, capsys):
    """Only a Transfer-Encoding of exactly 'chunked' is framed by http.client, which reads
    the body: 'gzip, chunked' is read to the close, unframed, and was cached silently."""
    src = _source(server.url("/not-only-chunked.txt"), cache_dir)
    assert src.local_path(progress=False).read_bytes() == TEXT
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("corpusprep: warning: ") and "no Content-Length" in line, line


def test_cli_a_download_of_no_stated_length(server, cache_dir, tmp_path):
    """The warning's pin, pasted, refuses the cut copy the first run kept, and takes the
    whole file once it is downloaded again."""
    url = server.url("/no-length.txt")
    args = ("source=url", f"source.url={url}", "source.retries=0", "quiet=true")
    env = {"CORPUSPREP_CACHE_DIR": str(cache_dir)}
    result = run_cli(*args, f"out_dir={tmp_path}/out", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if url in x]  # (and: val is small)
    pin = line.split("pin it with ")[1].split()[0].rstrip(";,.")
    assert pin == f"source.sha256={hashlib.sha256(TEXT).hexdigest()}", line
    # the same URL cut short: the unpinned run cannot tell; the pinned one can
    cut = cache_dir / "cut"
    cut_args = ("source=url", f"source.url={server.url('/no-length-cut.txt')}",
                "source.retries=0", "quiet=true")  # fmt: skip
    cut_env = {"CORPUSPREP_CACHE_DIR": str(cut)}
    result = run_cli(*cut_args, pin, f"out_dir={tmp_path}/cut", cwd=tmp_path, env=cut_env)
    assert_one_line_error(result, "expected " + pin.split("=")[1])
    assert _cached(cut) == []
    result = run_cli(*args, pin, f"out_dir={tmp_path}/out2", cwd=tmp_path, env=env)
    assert result.returncode == 0 and url not in result.stderr, result.stderr


def test_part_files_of_killed_downloads_are_removed(server, cache_dir, tmp_path):
    """A download killed by SIGKILL leaves its part file: the next download of the same
    file removes those unwritten for an hour, and nothing else."""
    import os
    import time

    src = _source(server.url("/input.txt"), cache_dir)
    dest = src.cache_path()
    cache_dir.mkdir(exist_ok=True)
    stale, fresh, linked = (dest.with_name(f".{dest.name}.{n * 16}.part") for n in "abc")
    other = dest.with_name(f".other.txt.{'d' * 16}.part")
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    for path in (stale, fresh, other):
        path.write_bytes(b"half a download")
    linked.symlink_to(victim)
    hour_ago = time.time() - 3700
    for path in (stale, other):
        os.utime(path, (hour_ago, hour_ago))
    os.utime(linked, (hour_ago, hour_ago), follow_symlinks=False)
    assert src.local_path(progress=False).read_bytes() == TEXT
    assert not stale.exists()  # killed an hour ago: gone
    assert fresh.exists() and other.exists() and linked.is_symlink()  # live, or not its own
    assert victim.read_text() == "keep me"

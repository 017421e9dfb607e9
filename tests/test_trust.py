"""Safe with untrusted data: no code runs because of what a folder or a config says, a
damaged folder says so, and secrets stay out of everything corpusprep writes or prints.

Nothing here reaches the network: downloads come from LocalHTTPServer on 127.0.0.1 (and
127.0.0.2 for a second host).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, LocalHTTPServer, assert_one_line_error, compose, run_cli

import corpusprep
from corpusprep.errors import UserError
from corpusprep.prepare import prepare
from corpusprep.redact import redact, redact_text

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak.\n" * 60
SECRETS = ("secret", "hunter2")


pytestmark = pytest.mark.usefixtures("loopback_env")


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """A small char-level output folder."""
    src = tmp_path / "text.txt"
    src.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true"))
    return out


def inspect_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "corpusprep.inspect", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=env)  # fmt: skip


def assert_inspect_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("corpusprep.inspect: error: "), r.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _edit_manifest(out: Path, edit) -> None:
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


# --- 1. meta.pkl holds plain values only -----------------------------------------------


class _Gadget:
    """Unpickling this calls open(marker, "w"): what a hostile meta.pkl can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _plant_gadget(out: Path, marker: Path) -> None:
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    (out / "meta.pkl").write_bytes(pickle.dumps({**meta, "x": _Gadget(marker)}))

    def sizes(manifest):  # a consistent folder: only the pickle is hostile
        if "meta.pkl" in manifest.get("files", {}):
            manifest["files"]["meta.pkl"] = (out / "meta.pkl").stat().st_size

    _edit_manifest(out, sizes)


def test_a_pickle_gadget_in_meta_pkl_does_not_run(made: Path, tmp_path: Path):
    marker = tmp_path / "gadget-ran"
    _plant_gadget(made, marker)
    with pytest.raises(UserError) as e:
        corpusprep.load(made)
    message = str(e.value)
    assert "refusing to load" in message and str(made / "meta.pkl") in message
    assert "open" in message and "plain values" in message and "\n" not in message
    assert not marker.exists()
    r = inspect_cli(made, cwd=tmp_path)
    assert_inspect_error(r, "refusing to load", "meta.pkl", "plain values")
    assert not marker.exists()


def test_a_plain_meta_pkl_still_loads_and_a_broken_one_is_damaged(made: Path):
    assert corpusprep.load(made).meta["vocab_size"] > 0  # char's stoi/itos: plain values
    (made / "meta.pkl").write_bytes(b"\x80\x04not a pickle")
    _edit_manifest(made, lambda m: m.get("files", {}).pop("meta.pkl", None))
    with pytest.raises(UserError, match="damaged"):
        corpusprep.load(made)


@pytest.mark.parametrize("key", ["itos", "stoi"])
def test_a_meta_pkl_from_another_run_is_not_taken_for_this_ones(made: Path, key: str):
    """nanoGPT's sample.py decodes with meta.pkl's itos (encodes with its stoi), load()'s
    tokenizer with the manifest's record: a meta.pkl of another vocabulary of the same size
    (copied from another run) would make the two give different text, silently."""
    meta = pickle.loads((made / "meta.pkl").read_bytes())
    chars = [meta["itos"][i] for i in range(meta["vocab_size"])]
    chars[1], chars[2] = chars[2], chars[1]  # the same characters, two ids swapped
    other = {**meta, key: dict(enumerate(chars)) if key == "itos" else
             {c: i for i, c in enumerate(chars)}}  # fmt: skip
    (made / "meta.pkl").write_bytes(pickle.dumps(other))
    _edit_manifest(made, lambda m: m["files"].update({"meta.pkl": len(pickle.dumps(other))}))
    with pytest.raises(UserError) as e:
        corpusprep.load(made)
    message = str(e.value)
    assert str(made / "meta.pkl") in message and key in message and "\n" not in message
    assert "prepare" in message
    assert corpusprep.load(made, tokenizer=False).meta == other  # ids only: nothing to compare


# --- 2. _target_: only corpusprep's (and plugins') classes of the right kind -----------


def test_a_command_line_target_outside_corpusprep_is_refused(tmp_path: Path):
    (tmp_path / "t.txt").write_text(TEXT)
    r = run_cli("source=file", "source.path=t.txt", "out_dir=out", "tokenizer._target_=os.system",
                "~tokenizer.separator", "+tokenizer.command=touch pwned", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer._target_=os.system", "corpusprep")
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "out").exists()


def test_a_config_dir_target_outside_corpusprep_is_refused(tmp_path: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "t.txt").write_text(TEXT)
    (tmp_path / "conf" / "tokenizer").mkdir(parents=True)
    (tmp_path / "conf" / "tokenizer" / "evil.yaml").write_text(
        f"_target_: builtins.open\nfile: {victim}\nmode: w\nname: evil\n"
    )
    r = run_cli("--config-dir", str(tmp_path / "conf"), "tokenizer=evil", "source=file",
                "source.path=t.txt", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer._target_=builtins.open")
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize(
    ("content", "problem"),
    [("name: [broken\n", "expected ',' or ']'"), ("name: a\nname: b\n", "duplicate key name")],
)
def test_a_preset_that_is_not_valid_yaml_is_one_line(tmp_path: Path, multirun: bool,
                                                      content: str, problem: str):  # fmt: skip
    """A --config-dir file Hydra cannot parse: the file, the place and the fix, in one
    line (Hydra itself prints a traceback through its own code)."""
    (tmp_path / "t.txt").write_text(TEXT)
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "bad.yaml").write_text(content)
    r = run_cli("--config-dir", str(tmp_path / "conf"), *(["-m"] if multirun else []),
                "dataset=bad", "source=file", "source.path=t.txt", "out_dir=out",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, str(tmp_path / "conf" / "dataset" / "bad.yaml"), "not valid YAML",
                          "line 2", problem, "fix the file")  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize("key", ["callbacks.evil", "callbacks.sweep.evil"])  # nested too
def test_a_preset_cannot_make_hydra_run_code(tmp_path: Path, multirun: bool, key: str):
    """Hydra itself builds hydra.callbacks (and nested targets of its plugins) before
    corpusprep runs: a preset setting them is refused before anything is built."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "t.txt").write_text(TEXT)
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    node = "\n".join(f"{'  ' * (i + 1)}{part}:" for i, part in enumerate(key.split(".")))
    pad = "  " * (len(key.split(".")) + 1)
    (tmp_path / "conf" / "dataset" / "evil.yaml").write_text(
        f"# @package _global_\nname: evil\nhydra:\n{node}\n"
        f"{pad}_target_: builtins.open\n{pad}file: {victim}\n{pad}mode: w\n"
    )
    r = run_cli("--config-dir", str(tmp_path / "conf"), *(["-m"] if multirun else []),
                "dataset=evil", "source=file", "source.path=t.txt", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, f"hydra.{key}._target_=builtins.open")
    assert victim.read_text() == "precious\n"


def test_a_module_outside_corpusprep_is_not_even_imported(tmp_path: Path):
    (tmp_path / "t.txt").write_text(TEXT)
    (tmp_path / "evilmod.py").write_text(
        "open('imported', 'w').close()\n"
        "from corpusprep.tokenizers.char import CharTokenizer as Tok\n"
    )
    r = run_cli("source=file", "source.path=t.txt", "out_dir=out",
                "tokenizer._target_=evilmod.Tok", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "tokenizer._target_=evilmod.Tok")
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize(
    "case", ["builtins.open", "nested target", "wrong kind", "not there", "a function"]
)
def test_load_never_instantiates_what_an_edited_manifest_names(made, tmp_path, case):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    opener = {"_target_": "builtins.open", "file": str(victim), "mode": "w"}
    tokenizer, fragments = {
        "builtins.open": (opener, ["tokenizer._target_=builtins.open"]),
        # Hydra's instantiate built nested _target_s too (_convert_: all): plain values now
        "nested target": ({"_target_": "corpusprep.tokenizers.char.CharTokenizer",
                           "separator": opener}, []),  # fmt: skip
        "wrong kind": ({"_target_": "corpusprep.sources.url.UrlSource", "url": "http://h/x"},
                       ["tokenizer._target_=corpusprep.sources.url.UrlSource", "Tokenizer"]),
        "not there": ({"_target_": "corpusprep.tokenizers.nope.Nope"},
                      ["tokenizer._target_=corpusprep.tokenizers.nope.Nope", "has no nope"]),
        "a function": ({"_target_": "corpusprep.prepare.shutil.rmtree", "path": str(tmp_path)},
                       ["tokenizer._target_=corpusprep.prepare.shutil.rmtree"]),
    }[case]  # fmt: skip

    def edit(manifest):
        manifest["config"]["tokenizer"] = tokenizer

    _edit_manifest(made, edit)
    if fragments:
        with pytest.raises(UserError) as e:
            corpusprep.load(made)
        assert all(f in str(e.value) for f in fragments), str(e.value)
    else:
        with contextlib.suppress(UserError):  # a dict is no separator: refusing it is fine
            corpusprep.load(made)
    assert victim.read_text() == "precious\n"
    assert made.is_dir()


# --- 3. no environment variables in source values -------------------------------------


class _Files(LocalHTTPServer):
    """Serves TEXT at any path ending in .txt (query ignored); 404 otherwise."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.headers: dict[str, dict[str, str]] = {}
        self.redirects: dict[str, str] = {}
        self.bodies: dict[str, bytes] = {}
        super().__init__(_files_handler, host)


def _files_handler(server: _Files) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            server.hit(path)
            with server._lock:
                server.headers[path] = dict(self.headers.items())
            if path in server.redirects:
                self.send_response(302)
                self.send_header("Location", server.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = server.bodies.get(path)
            if body is None and path.endswith(".txt") and "missing" not in path:
                body = TEXT.encode()
            code = 200 if body is not None else 404
            body = body if body is not None else b"not found\n"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    return Handler


@pytest.fixture
def files():
    srv = _Files()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("how", ["url", "indirect", "headers", "indirect headers", "legacy env"])
def test_a_preset_cannot_copy_the_environment_into_a_source(tmp_path, files, how):
    url = f"{files.root}/x.txt"
    body = {
        "url": f"source:\n  url: {url}?k=${{oc.env:TRUST_TEST_SECRET}}\n",
        "indirect": "leak: ${oc.env:TRUST_TEST_SECRET,none}\n"
                    f"source:\n  url: {url}?k=${{leak}}\n",
        "headers": f"source:\n  url: {url}\n  headers:\n"
                   "    Authorization: Bearer ${oc.env:TRUST_TEST_SECRET}\n",
        "indirect headers": "leak: ${oc.env:TRUST_TEST_SECRET}\n"  # a key with a dot, too
                            f"source:\n  url: {url}\n  headers:\n    X.Key: ${{leak}}\n",
        "legacy env": f"source:\n  url: {url}?k=${{env:TRUST_TEST_SECRET}}\n",
    }[how]  # fmt: skip
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "leaky.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /source: url\nname: leaky\n" + body
    )
    r = run_cli("--config-dir", str(tmp_path / "conf"), "dataset=leaky", "out_dir=out",
                cwd=tmp_path, env={"TRUST_TEST_SECRET": "hunter3",
                                   "CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    key = {"headers": "source.headers.Authorization", "indirect headers": "source.headers"}.get(
        how, "source.url"
    )
    assert_one_line_error(r, key, "environment")
    assert "hunter3" not in r.stdout + r.stderr
    assert files.count("/x.txt") == 0


# --- 4. ids beyond the vocabulary ------------------------------------------------------


def test_an_id_beyond_the_vocabulary_is_damaged(made: Path, tmp_path: Path):
    vocab = json.loads((made / "manifest.json").read_text())["vocab_size"]
    ids = np.memmap(made / "train.bin", dtype=np.uint16, mode="r+")
    ids[len(ids) // 2] = 60_000
    ids.flush()
    del ids
    with pytest.raises(UserError) as e:
        corpusprep.load(made)
    assert "damaged" in str(e.value) and "train.bin" in str(e.value)
    assert "60,000" in str(e.value) and f"{vocab:,}" in str(e.value)
    ds = corpusprep.load(made, check_ids=False)  # documented: skip the scan
    assert int(ds.train.max()) == 60_000
    r = inspect_cli(made, "--verify", cwd=tmp_path)
    assert_inspect_error(r, "damaged", "train.bin")


# --- 5. HF_TOKEN goes to the Hub only --------------------------------------------------
# source=hf hands the token question to huggingface_hub: token=None (its own token) where
# a token may go, token=False elsewhere. tests/test_hf_source.py has the stand-in Hub.


def _hub_cli(tmp_path, monkeypatch, endpoint: str, *extra: str, env=None):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("CORPUSPREP_CACHE_DIR", str(tmp_path / "cache"))
    return run_cli("source=hf", "source.dataset=test/t", f"source.endpoint={endpoint}",
                   "tokenizer=byte", "eot=none", "split_by=tail", "val_size=2", "quiet=true",
                   "out_dir=out", *extra, cwd=tmp_path, env=env)  # fmt: skip


def test_the_hf_token_goes_to_the_hub_and_not_to_its_cdn(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from test_hf_source import Cdn, Hub, parquet

    cdn = Cdn()  # on 127.0.0.2: another host, as the Hub's CDN is
    hub = Hub(cdn)
    try:
        hub.push("test/t", {"data/train-00000-of-00001.parquet": parquet(["zero"] * 10)})
        r = _hub_cli(tmp_path, monkeypatch, hub.root, env={"HF_TOKEN": "hf_trust_token"})
        assert r.returncode == 0, r.stderr
        assert [h.get("Authorization") for _, _, h in hub.log] == ["Bearer hf_trust_token"] * 2
        assert [p for _, p, _ in cdn.log] and all("Authorization" not in h for *_, h in cdn.log)
    finally:
        hub.stop()
        cdn.stop()


def test_a_preset_cannot_send_the_hf_token_elsewhere(tmp_path, monkeypatch):
    """source.endpoint from a config file naming another host: asked, without the token
    (the host is reached through a proxy on 127.0.0.1, which sees every header)."""
    pytest.importorskip("huggingface_hub")
    from test_hf_source import Hub, jsonl

    hub = Hub()
    try:
        hub.push("test/t", {"data/train.jsonl": jsonl(["some text\n"] * 5)})
        env = {"HTTP_PROXY": hub.root, "http_proxy": hub.root, "HF_TOKEN": "hf_trust_token"}
        r = _hub_cli(tmp_path, monkeypatch, "http://collector.invalid", env=env)
        assert r.returncode == 0, r.stderr
        assert len(hub.log) == 3  # the dataset's info, then HEAD and GET of its file
        assert {h.get("Host") for *_, h in hub.log} == {"collector.invalid"}
        assert all("Authorization" not in h for *_, h in hub.log)
    finally:
        hub.stop()


@pytest.mark.parametrize(
    "endpoint, hf_endpoint, token",
    [
        ("https://huggingface.co", None, None),  # None: huggingface_hub's own token
        ("https://hf.co", None, None),
        ("http://huggingface.co", None, False),  # plain http
        ("https://huggingface.co.evil.example", None, False),
        ("https://evil.example", None, False),
        # a mirror gets the token only if the user's own HF_ENDPOINT names it, never a config
        ("https://hub.example", None, False),
        ("https://hub.example", "https://hub.example", None),
        ("https://hub.example:8443", "https://hub.example", False),
        ("http://hub.example", "http://hub.example", False),  # plain http
        ("http://127.0.0.1:8000", None, None),  # stays on this machine
        ("http://localhost:8000", None, None),
        ("http://127.0.0.1:bad", None, False),
    ],
)
def test_where_the_hf_token_may_go(monkeypatch, endpoint, hf_endpoint, token):
    from corpusprep.sources.hf import hub_token

    if hf_endpoint:
        monkeypatch.setenv("HF_ENDPOINT", hf_endpoint)
    assert hub_token(endpoint) is token


# --- 6. credentials in URLs are never written or printed ------------------------------


def test_redact():
    assert redact("http://user:secret@h:1/x.txt?token=hunter2&page=2") == (
        "http://***@h:1/x.txt?token=***&page=2"
    )
    assert redact("https://b.s3/x?X-Amz-Credential=a&X-Amz-Signature=b&sig=c&api_key=d") == (
        "https://b.s3/x?X-Amz-Credential=***&X-Amz-Signature=***&sig=***&api_key=***"
    )
    assert redact("https://h/@scope/pkg?q=1") == "https://h/@scope/pkg?q=1"
    assert redact_text("could not download http://u:p@h/x?key=k: HTTP 404") == (
        "could not download http://***@h/x?key=***: HTTP 404"
    )
    # an override as Hydra records it, its ':' escaped (the manifest's "overrides")
    assert redact_text(r"source.url=http\://u:p@h/x") == r"source.url=http\://***@h/x"


@pytest.mark.parametrize("password", ["s3cret(1)", "it's3cret", "{s3cret}", "a=b;c!*$"])
def test_redact_a_password_with_characters_that_end_a_url_in_text(password):
    """' ( ) are legal in a URL's password, unencoded: the redaction still takes it all."""
    for text in (f"source.url='http://user:{password}@127.0.0.1:9/x.txt'",
                 f"could not download http://user:{password}@h/x.txt (HTTP 404)"):  # fmt: skip
        assert "s3cret" not in redact_text(text) and "c!*$" not in redact_text(text), text
        assert "***@" in redact_text(text)
    assert redact_text("see http://host/x (from a@b)") == "see http://host/x (from a@b)"


@pytest.mark.parametrize("name", ["api-key", "x-api-key", "access_key", "private_key",
                                  "auth_code", "bearer", "Ocp-Apim-Subscription-Key"])  # fmt: skip
def test_redact_every_secret_query_name_a_header_of_that_name_would_hide(name):
    assert redact(f"http://h/x.txt?{name}=abc&page=2") == f"http://h/x.txt?{name}=***&page=2"


def test_hydras_multiline_error_hides_a_secret_header(tmp_path):
    header = "+source.headers.Authorization='Bearer hunter2'"
    r = run_cli("source=url", "source.url=http://127.0.0.1:9/x.txt", header, header,
                cwd=tmp_path, env={"CORPUSPREP_COMPOSE_CACHE": "0"})  # fmt: skip
    assert_one_line_error(r, "Could not append to config", "source.headers.Authorization=***")
    assert "hunter2" not in r.stdout + r.stderr


def _leaks(root: Path, *outputs: str) -> list[str]:
    """Every file (name or content) under root, and every output, holding a secret."""
    found = [f"output {i}" for i, text in enumerate(outputs) if any(s in text for s in SECRETS)]
    for path in root.rglob("*"):
        data = path.read_bytes() if path.is_file() else b""
        if any(s in str(path.relative_to(root)) or s.encode() in data for s in SECRETS):
            found.append(str(path))
    return found


def _secret_url(files: _Files, name: str) -> str:
    return f"http://user:secret@127.0.0.1:{files.port}/{name}?token=hunter2"


def test_url_credentials_not_in_manifest_summary_or_inspect(tmp_path, files):
    env = {"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")}
    r = run_cli(f"source.url='{_secret_url(files, 'a.txt')}'", "out_dir=out", cwd=tmp_path,
                env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert files.count("/a.txt") == 1
    # conf/source/url.yaml's own ${oc.env:CORPUSPREP_CACHE_DIR,null} is still allowed
    assert [p.name.endswith("-a.txt") for p in (tmp_path / "cache").iterdir()] == [True]
    assert "***@127.0.0.1" in r.stdout  # the summary still says where the text came from
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["source"]["url"] == f"http://***@127.0.0.1:{files.port}/a.txt?token=***"
    i = inspect_cli(tmp_path / "out", cwd=tmp_path)
    assert i.returncode == 0, i.stderr
    assert _leaks(tmp_path, r.stdout, r.stderr, i.stdout, i.stderr) == []


def test_a_password_with_brackets_and_quotes_is_written_nowhere(tmp_path, files):
    """`(`, `)` and `'` end a URL in running text, but not its password: the summary, the
    manifest, the compose cache (not even written: the command holds a secret) and a
    sweep's folders and tables never show it."""
    url = f"http://user:s3cret(1)'x@127.0.0.1:{files.port}/a.txt"
    env = {"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache"),
           "CORPUSPREP_COMPOSE_CACHE": str(tmp_path / "compose")}  # fmt: skip
    r = run_cli("source=url", f'source.url="{url}"', "out_dir=out", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    m = run_cli("-m", "source=url", f'source.url="{url}"', "split=0.8,0.9",
                "hydra.sweep.dir=sweep", cwd=tmp_path, env=env)  # fmt: skip
    assert m.returncode == 0, m.stderr
    c = run_cli("source=url", f'source.url="{url}"', "--cfg", "job", cwd=tmp_path, env=env)
    assert c.returncode == 0, c.stderr
    outputs = r.stdout + r.stderr + m.stdout + m.stderr + c.stdout + c.stderr
    assert "s3cret" not in outputs and "***@127.0.0.1" in r.stdout
    assert [p for p in tmp_path.rglob("*") if "s3cret" in str(p) or
            (p.is_file() and b"s3cret" in p.read_bytes())] == []  # fmt: skip


def test_url_credentials_not_in_an_error_line(tmp_path, files):
    r = run_cli(f"source.url='{_secret_url(files, 'missing.txt')}'", "out_dir=out",
                "source.retries=0", cwd=tmp_path,
                env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert_one_line_error(r, "HTTP 404", f"http://***@127.0.0.1:{files.port}/missing.txt")
    assert _leaks(tmp_path, r.stdout, r.stderr) == []


def test_url_credentials_not_in_a_sweep(tmp_path, files):
    # the first two differ in their token only: once redacted, their folders must still differ
    urls = [_secret_url(files, "a.txt"), _secret_url(files, "a.txt") + "x",
            _secret_url(files, "missing.txt")]  # fmt: skip
    r = run_cli("-m", "source.url=" + ",".join(f"'{u}'" for u in urls), "source.retries=0",
                cwd=tmp_path, env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert r.returncode == 1, r.stderr  # the missing one failed; the others went on
    assert files.count("/a.txt") == 2 and files.count("/missing.txt") == 1
    sweep = next((tmp_path / "multirun").glob("*/*"))
    assert (sweep / "multirun.yaml").is_file() and (sweep / "summary.csv").is_file()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 3 and len({p.name for p in jobs}) == 3  # one folder per job
    assert sum((job / "manifest.json").is_file() for job in jobs) == 2
    assert "HTTP 404" in (sweep / "summary.csv").read_text()
    assert _leaks(tmp_path, r.stdout, r.stderr) == []


SECRET_NAMES = ["Authorization", "X-Api-Key", "hf_token", "client_secret", "Cookie", "PASSWORD",
                "x-amz-security-token", "api-key", "AccessKey", "authToken", "X-AuthToken",
                "accessToken", "hfToken", "Authentication", "refresh_token", "token",
                "Ocp-Apim-Subscription-Key"]  # fmt: skip
PLAIN_NAMES = ["tokenizer", "shard_tokens", "add_special_tokens", "text_field", "url", "headers",
               "encoding", "author", "keys", "monkey", "key", "tokens_per_doc", "bytes_per_token",
               "bos_token", "eosToken", "pad_token_id", "max_token_length",
               "full_key"]  # fmt: skip
REDACTED = [  # (text, as written or printed)
    ("+source.headers.Authorization=Bearer hunter2", "+source.headers.Authorization=***"),
    (
        "source.headers={Authorization: Bearer hunter2, Accept: text/plain}",
        "source.headers={Authorization: ***, Accept: text/plain}",
    ),
    ("    X-Api-Key: 'hunter2'\n    Accept: x\n", "    X-Api-Key: ***\n    Accept: x\n"),
    # Hydra joins a job's overrides with commas: a URL before the secret must not hide it
    (
        "source.url=http://h/a.txt,+source.headers.Origin=http://h,+source.headers.X-Api-Key=k",
        "source.url=http://h/a.txt,+source.headers.Origin=http://h,+source.headers.X-Api-Key=***",
    ),
    # a value holding a comma is hidden whole
    ('+source.headers.Authorization="Bearer abc,hunter2"', "+source.headers.Authorization=***"),
    ("https://h/get?ids=1,2&token=abc", "https://h/get?ids=1,2&token=***"),
]
KEPT = ["tokenizer=tiktoken", "shard_tokens=5", "source.url=https://h/x.txt",
        "tokenizer.add_special_tokens=false", "split_by=head: needs val_size=N",
        "    token = make(a, b)\n",  # a traceback's line of code is no override
        # a folder name already holds the mask as "_" (config._safe): left as it is
        "out/+source.headers.X-Api-Key=_,source.url=http_//h-job0"]  # fmt: skip


def test_redact_secret_names():
    """A value under a secret's name (a header, a config key) is hidden wherever it is
    written: an override, a YAML line, a flow mapping, a JSON-like value."""
    from corpusprep.redact import is_secret_name, redact_override, redact_values

    assert [n for n in SECRET_NAMES if not is_secret_name(n)] == []
    assert [n for n in PLAIN_NAMES if is_secret_name(n)] == []
    assert [(t, redact_text(t)) for t, want in REDACTED if redact_text(t) != want] == []
    assert [t for t in KEPT if redact_text(t) != t] == []
    assert redact_override("+source.headers.Cookie=session=abc, hunter2") == (
        "+source.headers.Cookie=***"
    )
    assert redact_values({"headers": {"Authorization": "Bearer hunter2", "Accept": "a",
                                      "X-Api-Key": 12345678},
                          "tokenizer": {"encoding": "gpt2"}, "hf_token": None}) == {
        "headers": {"Authorization": "***", "Accept": "a", "X-Api-Key": "***"},
        "tokenizer": {"encoding": "gpt2"}, "hf_token": None}  # fmt: skip


def test_an_authorization_header_is_sent_and_never_written(tmp_path, files):
    """+source.headers.Authorization=... goes to the server, and nowhere else: not the
    manifest (its config and overrides), the summary, inspect, or the kept compose."""
    env = {"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache"),
           "CORPUSPREP_COMPOSE_CACHE": str(tmp_path / "compose")}  # fmt: skip
    r = run_cli(f"source.url={files.root}/a.txt", "+source.headers.Authorization=Bearer hunter2",
                "out_dir=out", cwd=tmp_path, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert files.headers["/a.txt"]["Authorization"] == "Bearer hunter2"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["source"]["headers"] == {"Authorization": "***"}
    assert "+source.headers.Authorization=***" in manifest["overrides"]
    i = inspect_cli(tmp_path / "out", cwd=tmp_path)
    assert i.returncode == 0, i.stderr
    assert _leaks(tmp_path, r.stdout, r.stderr, i.stdout, i.stderr) == []


def test_an_api_key_header_is_not_in_a_sweep(tmp_path, files):
    r = run_cli("-m", f"source.url={files.root}/a.txt,{files.root}/b.txt",
                "+source.headers.X-Api-Key=hunter2", cwd=tmp_path,
                env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert files.headers["/b.txt"]["X-Api-Key"] == "hunter2"
    sweep = next((tmp_path / "multirun").glob("*/*"))
    assert "X-Api-Key: '***'" in (sweep / "multirun.yaml").read_text() or (
        "X-Api-Key: ***" in (sweep / "multirun.yaml").read_text()
    )
    assert _leaks(tmp_path, r.stdout, r.stderr) == []


def test_a_sweep_with_a_secret_header_after_a_url_hides_it_and_fills_its_table(tmp_path, files):
    r = run_cli("-m", f"source.url={files.root}/a.txt,{files.root}/b.txt",
                f"+source.headers.Origin={files.root}", "+source.headers.X-Api-Key=12345678",
                cwd=tmp_path, env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert files.headers["/b.txt"]["X-Api-Key"] == "12345678"  # a number, sent as written
    sweep = next((tmp_path / "multirun").glob("*/*"))
    rows = (sweep / "summary.csv").read_text().splitlines()
    header = rows[0].split(",")
    for line in rows[1:]:  # every job's tokens found: its record names its real folder
        assert line.split(",")[header.index("train_tokens")], line
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"12345678" not in path.read_bytes(), path
        assert "12345678" not in str(path)
    assert "12345678" not in r.stdout + r.stderr


def test_a_header_value_with_a_comma_is_sent_whole_and_never_shown(tmp_path, files):
    env = {"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache"),
           "CORPUSPREP_COMPOSE_CACHE": str(tmp_path / "compose")}  # fmt: skip
    r = run_cli(f"source.url={files.root}/a.txt",
                '+source.headers.Authorization="Bearer abc,hunter2"', "out_dir=out",
                cwd=tmp_path, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert files.headers["/a.txt"]["Authorization"] == "Bearer abc,hunter2"
    # unquoted, the commas make a sweep: the error line shows no part of the value
    r2 = run_cli(f"source.url={files.root}/a.txt",
                 "+source.headers.Authorization=Bearer abc,hunter2", "out_dir=out2",
                 cwd=tmp_path, env=env)  # fmt: skip
    assert_one_line_error(r2, "+source.headers.Authorization=***", "several values make a sweep")
    assert _leaks(tmp_path, r.stdout, r.stderr, r2.stdout, r2.stderr) == []


LONG_SECRET = "Bearer " + "a" * 70 + " " + "b" * 70 + " SECRETTAIL"  # YAML folds it


@pytest.mark.parametrize(
    "flags",
    [
        ("--cfg", "job"),
        ("--cfg", "all"),
        ("--info",),
        ("-c", "hydra"),
        ("--cf", "job"),
        ("-cjob",),
        ("--inf",),
    ],  # fmt: skip
)
def test_hydras_own_printouts_mask_a_secret_header(tmp_path, flags):
    """Hydra's --cfg, --info print the config and the overrides as written (abbreviated
    flags too): a secret's value is masked before Hydra sees it, whatever its shape (long
    enough for YAML to fold it, a list, a value with commas), and each printed line goes
    through the redaction."""
    r = run_cli("source=url", "source.url=http://127.0.0.1:9/a.txt",
                f"+source.headers.Authorization={LONG_SECRET}",
                "+source.headers.X-Api-Key=[hunter2,hunter3]",
                "+source.headers.Proxy-Authorization='Digest user=bob, realm=r, response=6629'",
                *flags, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Authorization" in r.stdout and "***" in r.stdout
    for secret in ("SECRETTAIL", "aaaa", "hunter", "6629", "realm"):
        assert secret not in r.stdout + r.stderr, secret


def test_hydras_printout_into_a_closed_pipe_ends_quietly(tmp_path):
    """`--help | head -1`: the reader goes away; the command still ends with 0, no
    traceback (as before the printout went through the redaction)."""
    for flag in ("--help", "--cfg=job"):
        done = subprocess.run(f"{sys.executable} -m corpusprep {flag} | head -1", shell=True,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        assert done.stdout.strip() and "Traceback" not in done.stderr, done.stderr


def test_an_override_that_cannot_be_parsed_is_named_without_its_secret(tmp_path):
    r = run_cli("source=url", "+source.headers.Authorization='Bearer hunter2", cwd=tmp_path)
    assert_one_line_error(r, "+source.headers.Authorization=***", "cannot parse this override")
    assert "hunter2" not in r.stdout + r.stderr
    r = run_cli("name=extend_list(1)", cwd=tmp_path)  # no secret: Hydra's reason is kept
    assert_one_line_error(r, "name=extend_list(1)", "Unknown function 'extend_list'")


def test_a_path_ending_in_a_secret_word_keeps_the_message_after_it():
    """An attack: "/tmp/x/passwd: no such file" was shown as "/tmp/x/passwd: ***"."""
    assert redact_text("/tmp/x/passwd: no such file") == "/tmp/x/passwd: no such file"
    assert redact_text("C:\\x\\token: not a file") == "C:\\x\\token: not a file"
    assert redact_text("password: hunter2") == "password: ***"  # a name, not a path
    assert redact_text("run/api_key=abc") == "run/api_key=***"  # name=value: hidden

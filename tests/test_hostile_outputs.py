"""Reading back a folder that may come from anyone (corpusprep.load, python -m
corpusprep.inspect): the names its manifest gives stay inside it, a FIFO or a device is
never opened (a link is followed to a regular file), a meta.pkl cannot fill memory, a
malformed manifest, job record or index is one line naming it, and a tokenizer's ranks file
is read at a bounded size and used only if it is the one the folder was made with.

A FIFO that is opened blocks until a writer comes: each call that may open one runs in a
thread (`finishes`), so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from helpers import REPO, compose, without_kept_copies

import corpusprep
from corpusprep import inspect as cp_inspect
from corpusprep.errors import UserError
from corpusprep.prepare import prepare
from corpusprep.tokenizers.reuse import ReusedTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak.\n" * 80
DOCS = "".join(json.dumps({"text": f"doc {i}: " + "word " * (i % 17)}) + "\n" for i in range(300))
KINDS = {
    "char": ("text.txt",),
    "docs": ("docs.jsonl",),  # a document index in doc_index/
    "npy": ("text.txt", "format=npy"),
    "llmc": ("text.txt", "format=llmc"),
    "megatron": ("docs.jsonl", "format=megatron"),  # its .idx lists the documents
}
MB = 1 << 20


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """One good folder of each kind, made once; tests damage copies (`folder`)."""
    root = tmp_path_factory.mktemp("made")
    (root / "text.txt").write_text(TEXT)
    (root / "docs.jsonl").write_text(DOCS)
    out = {}
    for kind, (src, *extra) in KINDS.items():
        out[kind] = root / kind
        prepare(compose("source=file", f"source.path={root / src}", f"out_dir={out[kind]}",
                        "quiet=true", *extra))  # fmt: skip
    return out


@pytest.fixture
def folder(made, tmp_path) -> Callable[[str], Path]:
    def copy(kind: str) -> Path:
        return Path(shutil.copytree(made[kind], tmp_path / kind))

    return copy


def edit(folder: Path, change: Callable[[dict], Any]) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def list_size(folder: Path, name: str) -> None:
    """The manifest agrees with the file's new size: only its content is hostile."""
    edit(folder, lambda m: m["files"].__setitem__(name, (folder / name).stat().st_size))


def finishes(call: Callable[[], Any], *fifos: Path, seconds: float = 30) -> Any:
    """call() in a thread: what it returns or raises. A FIFO it opened would block it for
    ever: after `seconds` the FIFOs are opened for writing (which frees it) and the test
    fails."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
        pytest.fail(f"still blocked after {seconds} s: it opened a FIFO")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def refused(folder: Path, *fragments: str, fifos: tuple[Path, ...] = ()) -> str:
    """load() refuses the folder with one line holding every fragment."""
    with pytest.raises(UserError) as e:
        finishes(lambda: corpusprep.load(folder), *fifos)
    message = str(e.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def inspect_line(capsys, *args: Any, fifos: tuple[Path, ...] = ()) -> str:
    """`python -m corpusprep.inspect ARGS`, in this process: exit 1 and one line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        finishes(lambda: cp_inspect.main([str(a) for a in args]), *fifos)
    assert e.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("corpusprep.inspect: error: "), err
    return lines[0]


def peak_bytes(call: Callable[[], Any]) -> int:
    """The most memory Python allocated while call() ran (it is expected to raise)."""
    tracemalloc.start()
    try:
        with contextlib.suppress(UserError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- 6. FIFOs, links and names that leave the folder -----------------------------------


def test_an_unlisted_meta_pkl_that_is_a_fifo_is_refused_at_once(folder, capsys):
    out = folder("char")
    (out / "meta.pkl").unlink()
    os.mkfifo(out / "meta.pkl")

    def unlist(m):
        del m["files"]["meta.pkl"], m["checksums"]["meta.pkl"]

    edit(out, unlist)
    refused(out, "meta.pkl", "not a regular file", fifos=(out / "meta.pkl",))
    line = inspect_line(capsys, out, fifos=(out / "meta.pkl",))
    assert "meta.pkl" in line and "not a regular file" in line


def _inspect_command(out: Path) -> subprocess.CompletedProcess:
    """`python -m corpusprep.inspect OUT` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(out)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_fifo_repro_through_the_real_command(folder):
    """The attacker's own repro, as a user runs it: one line, at once."""
    out = folder("npy")
    os.mkfifo(out / "x.npy")
    edit(out, lambda m: m["format"]["shards"]["val"].append({"file": "x.npy", "tokens": 0}))
    r = _inspect_command(out)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "x.npy" in lines[0] and "not a regular file" in lines[0]


@pytest.mark.parametrize("key", ["name", "note", "source/path"])
def test_a_lone_surrogate_in_a_manifest_is_shown_escaped(folder, key):
    """Found by an attack: JSON may spell a lone surrogate ("\\ud800"), which no run writes
    and stdout cannot encode: inspect printed its summary, then a UnicodeEncodeError
    traceback. It is shown escaped."""
    out = folder("char")
    _set(key, "x\ud800y")(out / "manifest.json")
    r = _inspect_command(out)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert "x\\ud800y" in r.stdout


@pytest.mark.parametrize("key", ["name", "note", "source/path"])
def test_terminal_escapes_in_a_manifest_are_shown_not_sent(folder, key):
    """Found by an attack: a stranger's manifest may hold terminal escape sequences (an
    OSC that retitles the window or writes the clipboard, an ANSI one that hides or
    rewrites lines): inspect printed them raw to the user's terminal. Shown escaped."""
    out = folder("char")
    _set(key, "x\x1b]52;c;cHduZWQ=\x07y\x1b[2Kz\x9b1m\rw")(out / "manifest.json")
    r = _inspect_command(out)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert not set("\x1b\x07\x9b\r") & set(r.stdout), repr(r.stdout)
    assert "x\\x1b]52;c;cHduZWQ=\\x07y" in r.stdout


@pytest.mark.parametrize("key", ["name", "note", "source/path"])
def test_a_line_end_in_a_manifest_string_cannot_fake_a_row(folder, key):
    """A value's line end began a line of its own in inspect's table: a stranger's manifest
    could add a row that looks like the folder's (here, a count of tokens). Each value is
    one row: its line ends are shown escaped."""
    out = folder("char")
    _set(key, "x\n  train        999 tokens\u2028y")(out / "manifest.json")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(out)], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert "999" not in "".join(line for line in r.stdout.splitlines() if "x\\n  train" not in line)
    assert "x\\n  train        999 tokens\\u2028y" in r.stdout


@pytest.mark.parametrize("kind", ["npy", "llmc"])
def test_a_shard_that_is_a_fifo_is_refused_at_once(folder, kind):
    out = folder(kind)
    name = f"x.{'npy' if kind == 'npy' else 'bin'}"
    os.mkfifo(out / name)
    edit(out, lambda m: m["format"]["shards"]["val"].append({"file": name, "tokens": 0}))
    refused(out, name, "not a regular file", fifos=(out / name,))


def test_a_megatron_prefix_naming_a_fifo_is_refused_at_once(folder):
    out = folder("megatron")
    os.mkfifo(out / "evil.idx")
    edit(out, lambda m: m["format"]["splits"]["val"].__setitem__("prefix", "evil"))
    refused(out, "evil.idx", "not a regular file", fifos=(out / "evil.idx",))


def test_a_doc_index_that_is_a_fifo_is_refused_at_once(folder):
    out = folder("docs")
    index = out / "doc_index" / "val.docs.bin"
    index.unlink()
    os.mkfifo(index)
    refused(out, "val.docs.bin", "not a regular file", fifos=(index,))


# a review: a Hub snapshot's files (and DVC's, git-annex's) are links into a store of
# blobs; a link is followed, and what it leads to must be a regular file of the right size
def test_a_shard_that_links_to_a_regular_file_loads_and_to_a_device_is_refused(folder, tmp_path):
    out = folder("npy")
    shard = next(out.glob("*_val_*.npy"))
    elsewhere = tmp_path / "elsewhere.npy"
    shutil.copy(shard, elsewhere)
    shard.unlink()
    shard.symlink_to(elsewhere)
    ds = corpusprep.load(out)
    assert len(ds.val) == ds.manifest["tokens"]["val"]
    shard.unlink()
    shard.symlink_to("/dev/zero")
    refused(out, shard.name, "not a regular file")


def test_a_doc_index_folder_that_links_elsewhere_loads(folder, tmp_path):
    out = folder("docs")
    shutil.move(out / "doc_index", tmp_path / "elsewhere")
    (out / "doc_index").symlink_to(tmp_path / "elsewhere")
    assert corpusprep.load(out).train_docs is not None


def _shard_outside(tmp_path: Path, out: Path, how: str) -> str:
    (tmp_path / "outside").mkdir()
    ext = tmp_path / "outside" / "ext.npy"
    shutil.copy(next(out.glob("*_val_*.npy")), ext)
    return str(ext) if how == "absolute" else "../outside/ext.npy"


@pytest.mark.parametrize(
    "case",
    ["npy shard absolute", "npy shard ..", "llmc shard in a subfolder", "megatron prefix ..",
     "files entry ..", "files entry deeper in doc_index", "checksums entry absolute"],
)  # fmt: skip
def test_names_in_a_manifest_stay_inside_the_folder(folder, tmp_path, case):
    kind = case.split()[0] if case.split()[0] in KINDS else "docs"
    out = folder(kind)
    if case.startswith("npy"):
        name = _shard_outside(tmp_path, out, case.split()[-1])
        val = json.loads((out / "manifest.json").read_text())["format"]["shards"]["val"]
        edit(out, lambda m: m["format"]["shards"].__setitem__(
            "val", [{"file": name, "tokens": val[0]["tokens"]}]))  # fmt: skip
        key = "format.shards.val"
    elif case.startswith("llmc"):
        (out / "sub").mkdir()
        shard = next(out.glob("*_val_*.bin"))
        shutil.copy(shard, out / "sub" / shard.name)
        edit(out, lambda m: m["format"]["shards"]["val"][0].__setitem__(
            "file", f"sub/{shard.name}"))  # fmt: skip
        key = "format.shards.val"
    elif case.startswith("megatron"):
        (tmp_path / "outside").mkdir()
        for ext in ("idx", "bin"):
            shutil.copy(next(out.glob(f"*_val_*.{ext}")), tmp_path / "outside" / f"x.{ext}")
        edit(out, lambda m: m["format"]["splits"]["val"].__setitem__("prefix", "../outside/x"))
        key = "format.splits.val.prefix"
    else:
        victim = tmp_path / "victim.txt"
        victim.write_text("precious\n")
        name = {"..": "../victim.txt", "doc_index": "doc_index/../../victim.txt",
                "absolute": str(victim)}[case.split()[-1]]  # fmt: skip
        key = case.split()[0]
        edit(out, lambda m: m[key].__setitem__(name, 9 if key == "files" else "0" * 64))
    message = refused(out, "manifest.json", key, "not a file of the folder")
    assert "damaged" in message


# --- 7. meta.pkl cannot fill memory ----------------------------------------------------


def test_a_memo_bomb_in_meta_pkl_is_refused_without_filling_memory(folder):
    """9 bytes whose LONG_BINPUT asks the unpickler for a memo of 2**25 slots (565 MB)."""
    out = folder("char")
    (out / "meta.pkl").write_bytes(b"\x80\x04}r" + struct.pack("<I", 1 << 25) + b".")
    list_size(out, "meta.pkl")
    assert peak_bytes(lambda: corpusprep.load(out)) < 32 * MB
    refused(out, "meta.pkl", "memo index 33,554,432", "plain values")


# a review: small opcodes make big objects: 4 MB of EMPTY_SET took 990 MB (248 times); the
# walk refuses them by what they would cost before anything is made (the memory it takes
# itself is the file's: tracemalloc would make this test minutes long)
@pytest.mark.parametrize("opcode, count", [(b"\x8f", 5 << 20), (b"}", 14 << 20)])
def test_a_meta_pkl_of_many_empty_containers_is_refused_by_its_cost(folder, opcode, count):
    out = folder("char")  # EMPTY_SET, EMPTY_DICT: just over the bound's count of them
    (out / "meta.pkl").write_bytes(b"\x80\x04\x95" + struct.pack("<Q", count + 2) + b"(" +
                                   opcode * count + b"l.")  # fmt: skip
    list_size(out, "meta.pkl")
    refused(out, "meta.pkl", "memory", "plain values")


def test_the_biggest_meta_pkl_corpusprep_writes_still_loads(tmp_path):
    """A char vocabulary of every code point (1.1M ids), as meta.pkl holds it (stoi, itos):
    well within the cost bound."""
    from corpusprep.dataset import _check_plain

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    data = pickle.dumps({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                         "stoi": {ch: i for i, ch in enumerate(chars)}})  # fmt: skip
    _check_plain(data, tmp_path / "meta.pkl")


def test_a_meta_pkl_over_the_bound_is_refused_unread(folder):
    out = folder("char")
    with open(out / "meta.pkl", "r+b") as f:
        f.truncate(65 * MB)  # sparse: no disk used
    list_size(out, "meta.pkl")
    assert peak_bytes(lambda: corpusprep.load(out)) < 16 * MB
    refused(out, "meta.pkl", "64 MB")


def test_a_meta_pkl_with_more_than_plain_values_is_refused_by_opcode(folder):
    out = folder("char")
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    (out / "meta.pkl").write_bytes(pickle.dumps({**meta, "x": bytearray(b"x")}, protocol=5))
    list_size(out, "meta.pkl")
    refused(out, "meta.pkl", "BYTEARRAY8", "plain values")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_plain_meta_pkl_of_any_protocol_still_loads(folder, protocol):
    out = folder("char")
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    # no bytes or set: below protocol 3 and 4 pickle makes them by calling a class
    more = [1.5, None, True, False, "\u00e9\n", (1, 2), 10**30, -7, {"a": [()]}]
    (out / "meta.pkl").write_bytes(pickle.dumps({**meta, "more": more}, protocol=protocol))
    list_size(out, "meta.pkl")
    assert corpusprep.load(out).meta["more"] == more


# --- 11. malformed manifests, records and indexes: one line naming them -----------------


def _text(change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(change(path.read_bytes()))


def _set(key: str, value: Any) -> Callable[[Path], None]:
    def change(m: dict) -> None:
        *parents, last = key.split("/")
        for parent in parents:
            m = m[parent]
        m[last] = value

    return lambda path: edit(path.parent, change)


def _chars(change: Callable[[str], Any]) -> Callable[[Path], None]:
    def chars(m: dict) -> None:
        m["tokenizer"]["chars"] = change(m["tokenizer"]["chars"])

    return lambda path: edit(path.parent, chars)


def _drop(key: str) -> Callable[[Path], None]:
    return lambda path: edit(path.parent, lambda m: m.pop(key))


MANIFESTS = {  # what is done to a good manifest.json, and what the one line names
    "trailing garbage": (_text(lambda data: data + b"\n}garbage"), "not valid JSON"),
    "a list": (_text(lambda data: b"[]"), "not a JSON object"),
    "nested 100,000 deep": (_text(lambda data: b"[" * 100_000), "not valid JSON"),
    "not UTF-8": (_text(lambda data: b"\xff" + data), "not valid JSON"),
    "no dtype": (_drop("dtype"), "dtype"),
    "dtype object": (_set("dtype", "object"), "dtype"),
    "no tokens": (_drop("tokens"), "tokens"),
    "tokens as text": (_set("tokens/train", "177,304"), "tokens.train"),
    "a size as text": (_set("files/train.bin", "x"), "files.train.bin"),
    "vocab_size NaN": (_set("vocab_size", float("nan")), "vocab_size"),
    "vocab_size beyond the dtype": (_set("vocab_size", 70_000), "vocab_size"),
    "format as text": (_set("format", "npy"), "format"),
    "shards not a list": (_set("format/shards", {"val": 5}), "format.shards.val"),
    "source bytes as text": (_set("source/bytes", "many"), "source.bytes"),
    # found by an attack: restore() raised TypeError or KeyError (inspect: a traceback)
    "chars a number": (_set("tokenizer/chars", 123), "tokenizer record"),
    "chars null": (_set("tokenizer/chars", None), "tokenizer record"),
    "no chars": (
        lambda path: edit(path.parent, lambda m: m["tokenizer"].pop("chars")),
        "tokenizer record",
    ),  # fmt: skip
    # found by an attack: chars as a list of as many numbers (or longer strings) as the
    # vocabulary was taken, and decoding raised TypeError (inspect: a traceback)
    "chars a list of numbers": (_chars(lambda chars: [ord(c) for c in chars]), "tokenizer record"),
    "chars a list of pairs": (_chars(lambda chars: [c + c for c in chars]), "tokenizer record"),
    # ... and a lone surrogate, which no text holds, raised UnicodeEncodeError on decoding
    "chars with a lone surrogate": (_chars(lambda c: c.replace("z", "\udc80")), "surrogate"),
}


@pytest.mark.parametrize("case", MANIFESTS)
def test_a_malformed_manifest_is_one_line_naming_the_key(folder, capsys, case):
    out = folder("char")
    change, fragment = MANIFESTS[case]
    change(out / "manifest.json")
    message = refused(out, "manifest.json", fragment)
    assert "damaged" in message
    line = inspect_line(capsys, out)
    assert "manifest.json" in line and fragment in line


@pytest.mark.parametrize("key", ["created", "seconds", "source"])
def test_inspect_names_a_key_its_summary_needs(folder, capsys, key):
    out = folder("char")
    _drop(key)(out / "manifest.json")
    corpusprep.load(out)  # load() itself needs none of these
    line = inspect_line(capsys, out)
    assert "manifest.json" in line and key in line


@pytest.mark.parametrize("index", ["kept", "dropped"])
def test_a_document_count_beyond_the_folder_is_refused_before_verify_allocates(
    folder, capsys, index
):
    """Found by an attack: --verify made the split's permutation of documents.total
    documents (a bool and an int64 each) before anything compared it with the folder: a
    manifest saying 10**12 asked for 931 GiB (MemoryError, a traceback), 10**9 for 9 GB.
    It must agree with the document index, or without one be at most one per input
    byte."""
    out = folder("docs")
    if index == "dropped":
        shutil.rmtree(out / "doc_index")

    def change(m: dict) -> None:
        m["documents"]["total"] = 10**12
        for key in ("files", "checksums"):
            m[key] = {k: v for k, v in m[key].items() if index == "kept" or "doc_index" not in k}

    edit(out, change)
    line = inspect_line(capsys, out, "--verify")
    assert "manifest.json" in line and "documents.total" in line


@pytest.mark.parametrize("eot_id", [None, 10**6])
@pytest.mark.parametrize("mode", ["append", "prepend"])
def test_an_eot_id_of_no_vocabulary_is_one_line_for_verify(folder, capsys, mode, eot_id):
    """Found by an attack: --verify decoded the manifest's eot.id as it was: beyond the
    vocabulary, an IndexError from the char tokenizer; null with an eot mode that writes
    one, a TypeError (tracebacks both)."""
    out = folder("docs")
    edit(out, lambda m: m.__setitem__("eot", {"mode": mode, "id": eot_id}))
    line = inspect_line(capsys, out, "--verify")
    assert "manifest.json" in line and "eot.id" in line


@pytest.mark.parametrize(
    "key, value", [("text_field", 5), ("text_field", ["text"]), ("skip_invalid", "yes"),
                   ("max_uncut_bytes", -5), ("doc_end", 5)],
)  # fmt: skip
def test_read_options_of_the_wrong_kind_are_one_line_for_verify(folder, capsys, key, value):
    """Found by an attack: --verify read the input again with the manifest's
    config.source options as they were: a text_field of 5 or a list was an AttributeError
    traceback deep in the JSON reader (the others were used as they came)."""
    out = folder("docs")
    edit(out, lambda m: m["config"]["source"].__setitem__(key, value))
    line = inspect_line(capsys, out, "--verify")
    assert "manifest.json" in line and f"config.source.{key}" in line


@pytest.mark.parametrize("value", ["x" * (1 << 20), "", "a\nb"])
def test_a_document_separator_the_run_would_refuse_is_one_line_for_verify(folder, capsys, value):
    """Found by an attack: --verify compiled the manifest's config.source.doc_separator as
    it was into the plan's regex, about 100 bytes per character: 100 MB of it, inside the
    1 GB a manifest may have, was a MemoryError traceback under a 4 GB limit (10 GB
    without). It is held to the run's own rules for it, a length bound among them."""
    out = folder("char")
    edit(out, lambda m: m["config"]["source"].__setitem__("doc_separator", value))
    line = inspect_line(capsys, out, "--verify")
    assert "manifest.json" in line and "source.doc_separator" in line and len(line) < 500


def test_a_doc_index_of_no_whole_offsets_is_damaged(folder):
    out = folder("docs")
    with open(out / "doc_index" / "val.docs.bin", "ab") as f:
        f.write(b"abc")
    list_size(out, "doc_index/val.docs.bin")
    refused(out, "val.docs.bin", "8-byte")


@pytest.mark.parametrize("where", ["beyond the tokens", "going back"])
def test_doc_index_offsets_out_of_range_are_damaged(folder, capsys, tmp_path, where):
    out = folder("docs")
    index = out / "doc_index" / "val.docs.bin"
    offsets = np.fromfile(index, dtype="<u8")
    if where == "beyond the tokens":
        offsets[5] = 2**63 + 5
    else:
        offsets[5] = offsets[4] - 1
    offsets.tofile(index)
    refused(out, "val.docs.bin", "offset")
    line = inspect_line(capsys, out, "--plot", tmp_path / "x.png")  # nothing is drawn
    assert "val.docs.bin" in line and not (tmp_path / "x.png").exists()


def _megatron_idx(out: Path) -> tuple[Path, bytes, int, int]:
    idx = next(out.glob("*_val_*.idx"))
    raw = idx.read_bytes()
    count, ndocs = struct.unpack("<QQ", raw[18:34])
    return idx, raw, count, ndocs


@pytest.mark.parametrize(
    "damage", ["no documents", "documents out of order", "empty", "a negative length",
               "a pointer elsewhere"],
)  # fmt: skip
def test_a_megatron_index_out_of_shape_is_damaged(folder, damage):
    """Found by an attack, the last two: lengths that add up to the tokens with one below 0,
    or a pointer that is not where the lengths before it end (Megatron reads by pointer)."""
    out = folder("megatron")
    idx, raw, count, ndocs = _megatron_idx(out)
    docs_at = 34 + 12 * count
    lengths = np.frombuffer(raw, "<i4", count, 34).copy()
    pointers = np.frombuffer(raw, "<i8", count, 34 + 4 * count).copy()
    assert count > 2
    if damage == "a negative length":
        lengths[0], lengths[1] = lengths[0] + lengths[1] + 5, -5
        raw = raw[:34] + lengths.tobytes() + raw[34 + 4 * count :]
    elif damage == "a pointer elsewhere":
        pointers[1] += 2
        raw = raw[: 34 + 4 * count] + pointers.tobytes() + raw[docs_at:]
    elif damage == "no documents":
        raw = raw[:26] + struct.pack("<Q", 0) + raw[34:docs_at]
    elif damage == "documents out of order":
        documents = np.frombuffer(raw, "<i8", ndocs, docs_at).copy()
        documents[1] = 10**6
        raw = raw[:docs_at] + documents.tobytes()
    else:
        raw = b""
    idx.write_bytes(raw)
    list_size(out, idx.name)
    refused(out, idx.name, "damaged")


def _sweep(made: dict[str, Path], tmp_path: Path) -> Path:
    """A sweep folder of two jobs, as a multirun leaves it."""
    sweep = tmp_path / "sweep"
    for job, tokenizer in enumerate(["char", "char"]):
        out = Path(shutil.copytree(made["char"], sweep / str(job)))
        record = {"job": job, "overrides": [f"tokenizer={tokenizer}", f"seed={job}"],
                  "status": "ok", "out_dir": str(out)}  # fmt: skip
        (out / "corpusprep_job.json").write_text(json.dumps(record))
    return sweep


@pytest.mark.parametrize(
    "record", ["not JSON", "[1]", '{"job": 1, "overrides": 5, "status": "ok"}',
               '{"job": "one", "overrides": [], "status": "ok"}',
               '{"job": 1, "overrides": [{"a": 1}], "status": "ok"}', "fifo"],
)  # fmt: skip
def test_a_malformed_job_record_is_one_line_naming_it(made, tmp_path, capsys, record):
    sweep = _sweep(made, tmp_path)
    cp_inspect.main([str(sweep)])  # the good sweep: a table
    assert "2 jobs" in capsys.readouterr().out
    path = sweep / "1" / "corpusprep_job.json"
    path.unlink()
    if record == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(record)
    line = inspect_line(capsys, sweep, fifos=(path,))
    assert str(path) in line


@pytest.mark.parametrize("field", ["overrides", "status"])
def test_a_line_end_in_a_job_record_cannot_fake_a_row_of_the_sweep_table(
    made, tmp_path, capsys, field
):
    sweep = _sweep(made, tmp_path)
    path = sweep / "1" / "corpusprep_job.json"
    record = json.loads(path.read_text())
    fake = "x\n    7      999,999  \x1b[2K"
    record[field] = [fake] if field == "overrides" else fake
    path.write_text(json.dumps(record))
    cp_inspect.main([str(sweep)])
    out = capsys.readouterr().out
    assert "x\\n    7      999,999  \\x1b[2K" in out and "\x1b" not in out
    assert not any(line.lstrip().startswith("7 ") for line in out.splitlines()), out


def test_a_line_end_in_an_error_of_inspect_is_shown_escaped(tmp_path):
    name = tmp_path / "a\nb"
    name.mkdir()
    r = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(name)],
                       env={**os.environ, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "a\\nb: not a corpusprep output folder" in r.stderr


# --- 12. a ranks file named by a folder: bounded, and only the one it was made with ------


def _as_tiktoken(out: Path, ranks_file: str, sha256: str = "0" * 64) -> None:
    """The folder's manifest says a tiktoken tokenizer with this ranks file made it."""

    def change(m):
        m["config"]["tokenizer"] = {"_target_": "corpusprep.tokenizers.tiktoken.TiktokenTokenizer",
                                    "encoding": "r50k_base", "ranks_file": ranks_file,
                                    "backend": "tiktoken"}  # fmt: skip
        m["tokenizer"] = {
            "kind": "tiktoken",
            "encoding": "r50k_base",
            "vocab_size": 50257,
            "ranks_sha256": sha256,
        }

    edit(out, change)


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_a_manifest_cannot_make_load_take_in_another_file(folder, tmp_path):
    """A file anywhere is read only up to a bound, and used only if its sha256 is the one
    recorded: nothing of any other file is taken in."""
    out = folder("char")
    big = _sparse(tmp_path / "big.tiktoken", 100 * MB)
    _as_tiktoken(out, str(big))
    assert peak_bytes(lambda: corpusprep.load(out)) < 32 * MB
    refused(out, "big.tiktoken", "64 MB")
    small = _sparse(tmp_path / "other.tiktoken", 1000)
    _as_tiktoken(out, str(small))
    message = refused(out, "other.tiktoken", "sha256")
    assert str(out) in message  # where to put the right one
    _as_tiktoken(out, str(small), sha256=None)
    refused(out, "manifest.json", "not recorded")


@pytest.mark.parametrize("planted", ["too big", "fifo", "link"])
def test_a_ranks_file_in_the_folder_must_be_a_regular_file_of_a_plausible_size(
    folder, tmp_path, planted
):
    out = folder("char")
    ranks = out / "ranks.tiktoken"
    if planted == "too big":
        _sparse(ranks, 100 * MB)
    elif planted == "fifo":
        os.mkfifo(ranks)
    else:
        ranks.symlink_to(_sparse(tmp_path / "outside.tiktoken", 1000))
    _as_tiktoken(out, "ranks.tiktoken")
    fragment = {"too big": "64 MB", "fifo": "not a regular file", "link": "sha256"}[planted]
    assert peak_bytes(lambda: finishes(lambda: corpusprep.load(out), ranks)) < 32 * MB
    refused(out, "ranks.tiktoken", fragment, fifos=(ranks,))


def test_a_ranks_file_given_by_the_user_has_a_bound_too(tmp_path):
    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    big = _sparse(tmp_path / "big.tiktoken", 100 * MB)
    assert peak_bytes(lambda: TiktokenTokenizer("r50k_base", ranks_file=str(big))) < 32 * MB
    with pytest.raises(UserError, match="64 MB"):
        TiktokenTokenizer("r50k_base", ranks_file=str(big))


def test_folders_made_with_a_ranks_file_load_from_the_cache_or_their_own_copy(
    tmp_path, tiktoken_cache, monkeypatch
):
    """Folders made before corpusprep kept the ranks file in them: read where it was
    (tests/test_standalone_folders.py has the folders made since)."""
    cached = tiktoken_cache / "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"  # r50k_base
    (tmp_path / "t.txt").write_text(TEXT)
    mine = tmp_path / "mine.tiktoken"
    shutil.copy(cached, mine)
    for name, ranks in (("cached", cached), ("mine", mine)):
        with without_kept_copies(monkeypatch):
            prepare(compose("source=file", f"source.path={tmp_path / 't.txt'}", "quiet=true",
                            f"out_dir={tmp_path / name}", "tokenizer=tiktoken",
                            "tokenizer.encoding=r50k_base",
                            f"tokenizer.ranks_file={ranks}"))  # fmt: skip
    # the file the folder was made with, where it was: the folder loads as it is
    assert corpusprep.load(tmp_path / "cached").tokenizer.decode([464]) == "The"
    assert corpusprep.load(tmp_path / "mine").tokenizer.decode([464]) == "The"
    assert ReusedTokenizer(str(tmp_path / "mine")).decode([464]) == "The"
    # changed since: refused, until the folder holds a copy of the very file, by its name
    whole = mine.read_bytes()
    mine.write_bytes(whole[:-40])
    refused(tmp_path / "mine", "mine.tiktoken", "sha256")
    with pytest.raises(UserError, match="sha256"):
        ReusedTokenizer(str(tmp_path / "mine"))
    (tmp_path / "mine" / "mine.tiktoken").write_bytes(whole)
    assert corpusprep.load(tmp_path / "mine").tokenizer.decode([464]) == "The"
    assert ReusedTokenizer(str(tmp_path / "mine")).decode([464]) == "The"


# --- 12. shards cut or swollen where their headers are ----------------------------------


@pytest.mark.parametrize("size", [0, 3, 1023])
def test_an_llmc_shard_cut_inside_its_header_is_one_line(folder, capsys, size):
    """A shard shorter than llm.c's 1,024-byte header, at a size that is no whole number of
    int32 (the manifest agreeing): it was a ValueError traceback of np.frombuffer."""
    out = folder("llmc")
    shard = next(out.glob("*_val_*.bin"))
    os.truncate(shard, size)
    list_size(out, shard.name)
    refused(out, shard.name, "llm.c")
    assert shard.name in inspect_line(capsys, out)


def test_a_npy_header_of_a_gigabyte_is_refused_unread(folder, capsys):
    """A version 2.0 .npy may say its header is up to 4 GB long: numpy reads it whole (a
    sparse file costs no disk) before its own size check, and says so in a message of
    several lines. It is refused from its length, in one line, in little memory."""
    out = folder("npy")
    shard = next(out.glob("*_val_*.npy"))
    with open(shard, "wb") as f:
        f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 30))
        f.truncate(12 + (1 << 30) + 64)
    list_size(out, shard.name)
    assert peak_bytes(lambda: corpusprep.load(out)) < 32 * MB
    refused(out, shard.name, "header")
    assert shard.name in inspect_line(capsys, out)


@pytest.mark.parametrize("where", ["config.tokenizer", "a reuse's record"])
def test_a_tokenizer_record_nested_deep_within_json_limits_is_one_line(folder, capsys, where):
    """500 levels parse (json.loads goes to about 1,000), but copying the tokenizer's
    config to rebuild it recursed past Python's limit: a RecursionError traceback."""
    out = folder("char")
    nested: Any = 1
    for _ in range(500):
        nested = {"a": nested}

    def change(m: dict) -> None:
        config = {**m["config"]["tokenizer"], "extra": nested}
        if where == "config.tokenizer":
            m["config"]["tokenizer"] = config
        else:  # a folder made with tokenizer=reuse records the config it reused within
            m["tokenizer"] = {"kind": "reuse", "config": config, "reused": m["tokenizer"]}

    edit(out, change)
    refused(out, "manifest.json", "nested")
    assert "manifest.json" in inspect_line(capsys, out)
    with pytest.raises(UserError, match="nested"):
        ReusedTokenizer(str(out))

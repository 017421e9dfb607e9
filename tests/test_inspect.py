"""Reading outputs back: corpusprep.load and python -m corpusprep.inspect."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, compose

import corpusprep
from corpusprep.errors import UserError
from corpusprep.prepare import prepare


def inspect_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "corpusprep.inspect", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, env={"PYTHONPATH": str(REPO), **_env()},
    )  # fmt: skip


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(params=["char", "byte", "tiktoken"])
def made(request, tmp_path, tiktoken_cache):
    src = tmp_path / "text.txt"
    src.write_text("Hello wörld!\r\nSecond line, 😀.\n" * 300, encoding="utf-8")
    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                    f"tokenizer={request.param}", "shard_bytes=1000"))  # fmt: skip
    return src, out


def test_load_gives_arrays_tokenizer_and_manifest(made):
    src, out = made
    ds = corpusprep.load(out)
    assert isinstance(ds.train, np.memmap) and ds.dtype == np.uint16
    assert len(ds.train) == ds.manifest["tokens"]["train"]
    text = src.read_text(encoding="utf-8")
    cut = int(len(text) * 0.9)
    assert ds.tokenizer.decode_bytes(ds.val).decode() == text[cut:]
    assert ds.tokenizer.decode(ds.tokenizer.encode("Hello wörld")) == "Hello wörld"
    # meta.pkl's dict; none for GPT-2 (nanoGPT's default without one)
    assert ds.meta.get("vocab_size", 50_257) == ds.tokenizer.vocab_size


def test_inspect_and_verify(made, tmp_path):
    src, out = made
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for words in ("vocab_size", "most frequent tokens", "val starts with", "verified"):
        assert words in r.stdout


def test_verify_shows_an_input_file_name_on_its_one_line(tmp_path):
    """Found by an attack: --verify's last line named the input file with its line end kept
    (the summary keeps its own): a downloaded file's name began a line of its own, here one
    that looks like the summary's. The name is escaped whole, as the summary's rows are."""
    src = tmp_path / "\x1b]0;x\x07\n  train        999 tokens\u2028.txt"
    src.write_text("Hello world\n" * 300)
    out = tmp_path / "out"
    prepare(
        compose("source=files", f"source.glob={tmp_path}/*.txt", f"out_dir={out}", "quiet=true")
    )
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    verified = [line for line in r.stdout.splitlines() if line.startswith("verified")]
    assert len(verified) == 1 and verified[0].endswith(
        "999 tokens\\u2028.txt exactly (3,600 chars)"
    )
    assert "\\x1b]0;x\\x07\\n  train" in verified[0]
    assert not set("\x1b\x07\u2028") & set(r.stdout), r.stdout


def test_verify_catches_a_changed_byte(made, tmp_path):
    src, out = made
    ids = np.fromfile(out / "val.bin", np.uint16)
    ids[5] = ids[6] if ids[5] != ids[6] else ids[4]
    ids.tofile(out / "val.bin")
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 1 and "val.bin: its sha256" in r.stderr and "Traceback" not in r.stderr
    # with the manifest's checksum made to agree, decoding still finds the changed id
    m = json.loads((out / "manifest.json").read_text())
    m["checksums"]["val.bin"] = hashlib.sha256((out / "val.bin").read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(m))
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 1 and "differs from" in r.stderr and "Traceback" not in r.stderr


def test_verify_refuses_a_changed_source(made, tmp_path):
    src, out = made
    src.write_text("something else\n")
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 1 and "source changed" in r.stderr


def test_verify_tells_a_source_of_another_size_without_reading_it(made, tmp_path, monkeypatch):
    """A manifest pointing its source at a huge file (a planted sparse one, say) is told by
    the size it records, before any byte is hashed (found by an attack)."""
    import corpusprep.writer as writer
    from corpusprep.inspect import _input_files

    src, out = made
    big = tmp_path / "sparse.txt"
    with open(big, "wb") as f:
        f.truncate(1 << 40)  # a TB, on no disk
    m = json.loads((out / "manifest.json").read_text())
    (recorded,) = m["source"].get("files") or [m["source"]]
    recorded["path" if "path" in recorded else "file"] = str(big)
    (out / "manifest.json").write_text(json.dumps(m))
    monkeypatch.setattr(writer, "_digest_of", lambda *a: pytest.fail("hashed"))
    with pytest.raises(UserError, match="1,099,511,627,776 bytes, not"):
        _input_files(m, out)
    r = inspect_cli(out, "--verify", cwd=tmp_path)
    assert r.returncode == 1 and "source changed" in r.stderr, r.stderr
    # found by a review: without its size (or with a size of another type), hashed whole
    for bytes_ in (None, True):
        for record in (recorded, m["source"]):
            record.pop("bytes", None) if bytes_ is None else record.update(bytes=bytes_)
        (out / "manifest.json").write_text(json.dumps(m))
        r = inspect_cli(out, "--verify", cwd=tmp_path)
        assert r.returncode == 1 and "manifest.json" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_damaged_folders_are_reported(made):
    src, out = made
    with open(out / "train.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(UserError, match="train.bin: .* but the manifest says"):
        corpusprep.load(out)
    (out / "manifest.json").unlink()
    with pytest.raises(UserError, match="no manifest.json"):
        corpusprep.load(out)


def test_inspect_of_a_non_output_folder_is_one_line(tmp_path):
    r = inspect_cli(tmp_path, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("corpusprep.inspect: error:") and "no manifest" in r.stderr


@pytest.mark.parametrize("given, fragments", [
    ("data/shakespeare", ["data/shakespeare: no such folder", "from {cwd}", "full path"]),
    ("out/train.bin", ["out/train.bin: a file, not an output folder", "give its folder, out"]),
    ("my.txt", ["my.txt: not a corpusprep output folder", "!give its folder"]),
])  # fmt: skip
def test_inspect_of_a_folder_not_there_says_so(tmp_path, given, fragments):
    """Found by a newcomer's attack: inspect run from another folder than the run's (or
    given train.bin) said 'not a corpusprep output folder (no manifest.json)', as for a
    folder of other files, where the folder is not there at all (or is a file's)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "train.bin").write_bytes(b"\0\0")
    (tmp_path / "out" / "manifest.json").write_text("{}")
    (tmp_path / "my.txt").write_text("text")
    r = inspect_cli(given, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for fragment in fragments:
        if fragment.startswith("!"):
            assert fragment[1:] not in lines[0], lines[0]
        else:
            assert fragment.format(cwd=tmp_path) in lines[0], lines[0]


def test_inspect_of_compressed_documents_in_many_files(tmp_path):
    """Bytes per token is the text's, not the compressed files' (it said 0.409 for char
    tokens of .jsonl.gz files, where each token is one byte of text), and a glob is named
    as given, with its file count (it named the first file, beside all files' bytes)."""
    import gzip

    (tmp_path / "corpus").mkdir()
    for i in range(3):
        lines = "".join(
            json.dumps({"text": f"doc {i}.{j} " + "abc " * 50}) + "\n" for j in range(200)
        )
        (tmp_path / "corpus" / f"c{i}.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    out = tmp_path / "out"
    prepare(compose("source=files", f"source.glob={tmp_path}/corpus/*.jsonl.gz", f"out_dir={out}",
                    "quiet=true", "eot=none"))  # fmt: skip
    r = inspect_cli(out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("  ")}
    assert "corpus/*.jsonl.gz" in rows["source"] and "3 files" in rows["source"], rows["source"]
    assert rows["bytes/token"].split()[1] == "1.000", rows["bytes/token"]  # char: 1 byte each


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path, tiktoken_cache):
    """`python -m corpusprep.inspect DIR | head`: head leaves after its lines; the rest of
    the summary has nowhere to go, which is no error of the user's."""
    import tiktoken

    gpt2 = tiktoken.get_encoding("gpt2")  # its tokens, a line each: a long list of ids used
    pieces = (gpt2.decode([i]) for i in range(256, 50_000))
    src = tmp_path / "text.txt"
    src.write_text("\n".join(p for p in pieces if p.isprintable()) * 2, encoding="utf-8")
    out = tmp_path / "out"
    prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                    "tokenizer=tiktoken"))  # fmt: skip
    p = subprocess.Popen([sys.executable, "-m", "corpusprep.inspect", out, "--top", "50000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO), **_env()})  # fmt: skip
    p.stdout.readline()
    p.stdout.close()  # as head does
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) != 0
    assert "Traceback" not in err and err == "", err


@pytest.mark.parametrize("args, fragment", [
    (["--top", "-1"], "argument --top: '-1': give a whole number, 1 or more"),
    (["--top", "0"], "argument --top: '0': give a whole number, 1 or more"),
    (["--top", "abc"], "argument --top: 'abc': give a whole number, 1 or more"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    # found by a newcomer's attack: the report, and no figure, said nothing of it
    (["--plot="], "argument --plot: '': give the figure a file name, e.g. --plot stats.png"),
])  # fmt: skip
def test_a_bad_option_is_one_line(tmp_path, args, fragment):
    """An attack: --top -1 listed all but the last token; argparse's own mistakes printed
    its usage (3 lines) and exited with 2."""
    r = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(tmp_path), *args],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corpusprep.inspect: error: "), r.stderr
    assert fragment in lines[0] and "--help lists the options" in lines[0]


@pytest.mark.parametrize("fmt", ["npy", "llmc"])
def test_a_folder_of_more_shards_than_open_files_loads_and_verifies(fmt, tmp_path):
    """Found by an attack: every shard was mapped at load, each mapping holding a file
    descriptor, so a folder of more shards than the open-file limit (1,024 by default;
    1,000 shards of 10^8 tokens is fineweb's 100B) failed with 'Too many open files'."""
    import resource

    from helpers import run_cli

    (tmp_path / "t.txt").write_text("abcdefgh \n" * 700)
    done = run_cli("source=file", "source.path=t.txt", f"format={fmt}", "shard_tokens=20",
                   "name=t", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "out").glob(f"t_*.{'bin' if fmt == 'llmc' else 'npy'}"))) > 300

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))

    r = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "out", "--verify"],
                       cwd=tmp_path, capture_output=True, text=True, preexec_fn=few_files,
                       env={"PYTHONPATH": str(REPO), **_env()})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "verified" in r.stdout


def test_a_training_loop_over_many_shards_maps_each_once(tmp_path):
    """Mapping shards when read, at most 64 kept, made random reads over a folder of more
    shards map a file again on nearly every read (six times slower): the soft open-file
    limit is raised toward the hard one, as systemd advises, and every shard stays mapped.
    Where the hard limit is too low, 64 stay mapped and reads still work."""
    import resource

    from helpers import run_cli

    (tmp_path / "t.txt").write_text("abcdefgh \n" * 700)
    done = run_cli("source=file", "source.path=t.txt", "format=npy", "shard_tokens=20",
                   "name=t", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    read = ("import corpusprep, random, resource, numpy as np\n"
            "x = corpusprep.load('out', tokenizer=False, check_ids=False).train\n"
            "whole = np.asarray(x)\n"
            "for i in random.Random(0).choices(range(len(x) - 30), k=3000):\n"
            "    assert np.array_equal(x[i:i + 30], whole[i:i + 30])\n"
            "soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
            "print(len(x.shards), len(x.shards._open), soft)\n")  # fmt: skip
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for limits in [(200, hard), (200, 200)]:
        r = subprocess.run([sys.executable, "-c", read], cwd=tmp_path, capture_output=True,
                           text=True, env={"PYTHONPATH": str(REPO), **_env()},
                           preexec_fn=lambda lim=limits: resource.setrlimit(
                               resource.RLIMIT_NOFILE, lim))  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        shards, kept, soft = map(int, r.stdout.split())
        assert shards > 300
        if limits[1] == 200:
            assert (kept, soft) == (64, 200)  # the limit cannot be raised: 64 kept
        elif hard == resource.RLIM_INFINITY or hard >= shards + 300:
            assert kept == shards and soft > shards  # raised: every shard kept

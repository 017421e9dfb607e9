"""source.format=lines, and source=hf's .txt files: one document per line, as Hugging Face
`datasets` reads a .txt data file (its text loader: universal newlines, line ends dropped,
an empty line an empty row). An attack found source=hf reading a .txt file as one document
where load_dataset gives a row per line; here the real library is the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import test_hf_source as hf
from helpers import run_cli
from test_hf_source import hf_cli

pytest.importorskip("datasets", reason="the reference is datasets.load_dataset")
_clean_env, hub = hf._clean_env, hf.hub  # the stand-in Hub and its CDN, the HF cache in tmp

TEXTS = {
    "plain": b"first line\nsecond line\nthird\n",
    "no end": b"one\ntwo",
    "blank lines": b"\n\na\n\n\nb\n\n",
    "crlf and cr": b"a\r\nb\rc\r\n\r\nd",
    "unicode": "\ufeffd\u00e9j\u00e0\u2028vu\n\u00fcber\x0bx\x0cy\x1cz\n".encode(),
    "one blank": b"\n",
    "long": b"".join(b"line %d %s\n" % (i, b"w " * (i % 300)) for i in range(3000)),
}


def _theirs(files: list[Path], home: Path) -> list[str]:
    """The rows datasets.load_dataset('text', data_files=...) reads, offline."""
    return hf.datasets_rows("'text', data_files=sys.argv[1:], split='train'", list(map(str, files)),
                            home)  # fmt: skip


def _documents(out: Path) -> list[str]:
    """The documents of a run with tiktoken's gpt2, eot appended, split_by=tail: all the
    ids in one stream, cut at the end-of-text token."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    ids = np.concatenate([np.fromfile(out / f"{s}.bin", dtype=np.uint16) for s in ("train", "val")])
    ends = np.flatnonzero(ids == enc.eot_token)
    assert len(ids) == 0 or ends[-1] == len(ids) - 1
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [enc.decode(ids[a:b].tolist()) for a, b in zip(starts, ends)]


COMMON = ("tokenizer=tiktoken", "eot=append", "split_by=tail", "val_size=1", "quiet=true")


@pytest.mark.parametrize("shard_bytes", ["1024", "8388608"])
def test_lines_are_the_rows_datasets_reads(shard_bytes, tmp_path):
    paths = []
    for i, data in enumerate(TEXTS.values()):
        paths.append(tmp_path / f"t{i}.txt")
        paths[-1].write_bytes(data)
    theirs = _theirs(paths, tmp_path / "home")
    result = run_cli("source=files", f"source.glob={tmp_path}/t*.txt", "source.format=lines",
                     *COMMON, f"shard_bytes={shard_bytes}", "executor.workers=2",
                     f"out_dir={tmp_path / 'out'}", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _documents(tmp_path / "out") == theirs
    assert theirs.count("") == 7 and len(theirs) > 3000  # the cases are there


def test_a_hub_datasets_txt_files_are_read_a_row_per_line(hub, tmp_path):
    files = {"data/train-a.txt": TEXTS["plain"], "data/train-b.txt": TEXTS["crlf and cr"]}
    hub.push("test/txt", files)
    result = hf_cli(tmp_path, hub, "test/txt", *COMMON, "out_dir=out")
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "repo"
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    theirs = _theirs(sorted(repo.rglob("*.txt")), tmp_path / "home")
    assert _documents(tmp_path / "out") == theirs == ["first line", "second line", "third",
                                                      "a", "b", "c", "", "d"]  # fmt: skip


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_file_is_not_lines_to_skip(tmp_path, encoding):
    """Found by an attack: with source.skip_invalid, only the BOM's line was left out, and
    every other line of UTF-16 text (a NUL before each ASCII letter) was taken as text."""
    from helpers import assert_one_line_error

    text = "hello there\n" * 100
    data = text.encode(encoding)
    (tmp_path / "t.txt").write_bytes(data if encoding == "utf-16" else b"\xfe\xff" + data)
    args = ("source=file", f"source.path={tmp_path / 't.txt'}", "source.format=lines", *COMMON)
    r = run_cli(*args, "source.skip_invalid=true", f"out_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert_one_line_error(r, "t.txt", "it is UTF-16: convert it")
    assert not (tmp_path / "out").exists()


def test_a_line_that_is_not_utf8_is_left_out_with_skip_invalid(tmp_path):
    (tmp_path / "t.txt").write_bytes(b"good\nba\xffd\n\nalso good\n")
    args = ("source=file", f"source.path={tmp_path / 't.txt'}", "source.format=lines", *COMMON)
    strict = run_cli(*args, f"out_dir={tmp_path / 'strict'}", cwd=tmp_path)
    assert strict.returncode == 1 and "not valid UTF-8 at byte 7" in strict.stderr
    skipping = run_cli(*args, "source.skip_invalid=true", f"out_dir={tmp_path / 'out'}",
                       cwd=tmp_path)  # fmt: skip
    assert skipping.returncode == 0, skipping.stderr
    assert _documents(tmp_path / "out") == ["good", "", "also good"]

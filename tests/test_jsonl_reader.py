"""JSONL lines are read by orjson where it is installed (corpusprep[fast]), and by the
stdlib's json otherwise or wherever orjson refuses a line or reads it otherwise: what is
read, what is skipped and every message must be the stdlib's, line for line (issue 13)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import run_cli

from corpusprep.errors import UserError
from corpusprep.formats import SKIPPED, InputFile, Segment, jsonl

orjson = pytest.importorskip("orjson")

# each a line where orjson and json may part: numbers, escapes, encodings, nesting, keys
LINES = [
    b'{"text": "plain"}',
    b'{"text": "a", "text": "b"}',  # a duplicate key: the last one, in both
    b'{"text": "\\ud83d\\ude00 pair"}',
    b'{"text": "\\ud800"}',  # a lone surrogate escape: orjson refuses, json reads it
    b'{"text": "\\ude00\\ud83d"}',  # a pair the wrong way round
    b'{"text": "\xed\xa0\x80"}',  # an encoded surrogate: json's surrogatepass reads it
    b'{"text": "\xff"}',  # not UTF-8
    b'{"text": "\xc0\x80"}',  # an overlong encoding
    b'{"text": "\xf4\x90\x80\x80"}',  # beyond U+10FFFF
    b'\xef\xbb\xbf{"text": "after a BOM"}',
    b'{"text": "a\tb"}',  # a raw control character in a string
    b'{"text": "a\x7fb"}',
    b'{"text": "\\u0000"}',
    b'{"text": "x", "n": NaN}',
    b'{"text": "x", "n": 1e400}',
    b'{"text": 123456789012345678901234567890}',  # orjson: a float; json: an int
    b'{"text": -9223372036854775809}',
    b'{"text": 1.5}',
    b'{"text": null}',
    b'{"text": ["a"]}',
    b'{"meta": {"body": "nested"}, "text": "top"}',
    b'{"text": "x"} trailing',
    b'{"text": "x",}',
    b"[1, 2]",
    b'"just a string"',
    b'\x00{"text": "x"}',
    b'  {"text": "spaces around"}  \r',
    b'{"text": "x"' + b', "deep": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"x": ' * 2000 + b"1" + b"}" * 2000,  # deeper than both readers go
    b'{"other": "no text field"}',
]


def _read(path: Path, text_field: str, skip_invalid: bool) -> list:
    """What the reader gives for the file: the texts, SKIPPED, or the error's one line."""
    file = InputFile(str(path), "jsonl", size=path.stat().st_size, text_field=text_field,
                     skip_invalid=skip_invalid)  # fmt: skip
    out: list = []
    try:
        for part in jsonl.FORMAT.parts(Segment(file, 0, file.size, file.size)):
            out.append("SKIPPED" if part is SKIPPED else part.pieces)
    except UserError as e:
        out.append(f"UserError: {e}")
    return out


@pytest.mark.parametrize("text_field", ["text", "meta.body"])
@pytest.mark.parametrize("skip_invalid", [False, True])
@pytest.mark.parametrize("line", LINES, ids=range(len(LINES)))
def test_each_line_reads_as_the_stdlib_reads_it(tmp_path, monkeypatch, line, text_field,
                                                 skip_invalid):  # fmt: skip
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"text": "before", "meta": {"body": "b"}}\n' + line + b"\n")
    fast = _read(path, text_field, skip_invalid)
    monkeypatch.setattr(jsonl, "_FAST_LOADS", None)
    assert fast == _read(path, text_field, skip_invalid)


def test_the_fast_reader_is_the_one_used(monkeypatch, tmp_path):
    """The comparison above compares two readers: orjson is really the one in use."""
    calls = []
    monkeypatch.setattr(jsonl, "_FAST_LOADS", lambda line: calls.append(line) or orjson.loads(line))
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "b"}\n')
    assert _read(path, "text", False) == [["a"], ["b"]]
    assert len(calls) == 2


def test_random_documents_read_the_same(tmp_path, monkeypatch):
    rng = random.Random(3)
    alphabet = ["a", " ", "\n", "\t", '"', "\\", "é", "日", "😀", "\x00", "\x1f", "/", "\u2028"]
    lines = []
    for i in range(400):
        doc = {"text": "".join(rng.choices(alphabet, k=rng.randrange(0, 60))), "id": i}
        if i % 7 == 0:
            doc["n"] = rng.choice([2**70, -(2**65), 1.25, None, [1, {"a": 2}]])
        lines.append(json.dumps(doc, ensure_ascii=bool(i % 2)).encode())
    path = tmp_path / "many.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    fast = _read(path, "text", False)
    monkeypatch.setattr(jsonl, "_FAST_LOADS", None)
    assert fast == _read(path, "text", False) and len(fast) == 400


def test_a_line_nested_too_deeply_is_one_line(tmp_path):
    """json's own RecursionError once ended the run with a traceback, after 3 retries."""
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"text": "fine"}\n' + b'{"x": ' * 100_000 + b"1" + b"}" * 100_000 + b"\n")
    out = tmp_path / "out"
    proc = run_cli("source=file", f"source.path={path}", "tokenizer=char", f"out_dir={out}",
                   cwd=tmp_path)  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"corpusprep: error: {path}:2: JSON nested too deeply to read; fix or remove the line"
    ], proc.stderr
    assert not (out / "train.bin").exists()

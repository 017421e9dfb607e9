"""JSONL lines are read by orjson where it is installed (corpusprep[fast]), and by the
stdlib's json otherwise or wherever orjson refuses a line or reads it otherwise: what is
read, what is skipped and every message must be the stdlib's, line for line (issue 13)."""

from __future__ import annotations

import json
import random
import tracemalloc
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


# --- what datasets' json builder reads beyond one object per line ----------------------------
# (tests/test_hf_source.py compares these forms with datasets.load_dataset itself)


def _parts(path: Path, compression: str = "none", **kwargs) -> list:
    """The texts the reader gives for the whole file, or its error's one line."""
    file = InputFile(str(path), "jsonl", compression, size=path.stat().st_size, **kwargs)
    segments = jsonl.FORMAT.plan(file, 1 << 30, None)
    out: list = []
    try:
        for start, end, nbytes in segments:
            for part in jsonl.FORMAT.parts(Segment(file, start, end, nbytes)):
                out.append("SKIPPED" if part is SKIPPED else "".join(part.pieces))
    except UserError as e:
        out.append(f"UserError: {e}")
    return out


DOCS = ["plain", "", "two\nlines", "é日😀", " \t", '"quoted" \\ back', "x" * 5000, "[not json]"]


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
@pytest.mark.parametrize("indent", [None, 0, 2])
def test_a_json_array_reads_element_by_element(tmp_path, monkeypatch, block, indent):
    """Objects and strings, at every place a block can end (a number split across two
    blocks included); one segment however small the shards, never cut."""
    monkeypatch.setattr(jsonl, "ARRAY_BLOCK", block)
    values = [{"text": d, "n": 12345678901234567890, "f": -1.5e-7} for d in DOCS] + DOCS
    path = tmp_path / "a.json"
    path.write_text(json.dumps(values, indent=indent, ensure_ascii=False) + "\n\r\n ")
    assert _parts(path) == DOCS + DOCS
    file = InputFile(str(path), "jsonl", size=path.stat().st_size)
    assert len(jsonl.FORMAT.plan(file, 64, None)) == 1


def test_a_compressed_json_array_and_an_empty_one(tmp_path):
    import gzip

    path = tmp_path / "a.json.gz"
    path.write_bytes(gzip.compress(json.dumps([{"meta": {"body": d}} for d in DOCS]).encode()))
    assert _parts(path, "gzip", text_field="meta.body") == DOCS
    (tmp_path / "e.json").write_text("[ \n]")
    assert _parts(tmp_path / "e.json") == []


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('[{"text": "a"},]', "element 2 of its JSON array: not valid JSON (Expecting value)"),
        ('[{"text": "a"} {"text": "b"}]', "element 1 of its JSON array: ',' expected, not '{'"),
        ('[{"text": "a"}] {"text": "b"}', "text after the array's end"),
        ('[{"text": "a"}', "element 1 of its JSON array: ',' expected, not 'the end of the file'"),
        ('[{"text": "a"}, {"text": "b', "element 2 of its JSON array: not valid JSON"),
        ('[{"text": "a"}, 3]', "element 2 of its JSON array: no field 'text' (found int)"),
        ('[{"body": "a"}]', "element 1 of its JSON array: no field 'text' (found ['body'])"),
        ('[{"text": ["a"]}]', "'text' is list, not a string"),
        ('[{"text": "\\ud800"}]', "element 1 of its JSON array: the text holds a lone surrogate"),
        ('[{"x": ' + "[" * 100_000 + "]" * 100_000 + "}]", "element 1 of its JSON array: nested"),
    ],
)  # fmt: skip
def test_a_bad_json_array_is_one_line_naming_the_element(tmp_path, body, fragment):
    path = tmp_path / "bad.json"
    path.write_text(body)
    out = _parts(path)
    assert out[-1].startswith("UserError: ") and fragment in out[-1], out[-1]
    assert "\n" not in out[-1]


def test_invalid_utf8_in_a_json_array_is_one_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b'[{"text": "ok"}, {"text": "\xff"}]')
    assert _parts(path)[-1] == (
        f"UserError: {path}: not valid UTF-8 at byte 27; fix the file "
        "(source.skip_invalid skips a JSON line, not a part of an array)"
    )


def test_a_json_array_holds_one_element_at_a_time(tmp_path, monkeypatch):
    """30 MB of array, elements of 3 KB: the reader holds about a block, never the array;
    an element longer than source.max_uncut_bytes is one line, read no further."""
    doc = json.dumps({"text": "word " * 600})
    path = tmp_path / "big.json"
    with open(path, "w") as f:
        f.write("[" + ",\n".join([doc] * 10_000) + "]")
    file = InputFile(str(path), "jsonl", size=path.stat().st_size)
    segment = Segment(file, 0, file.size, file.size)

    def count() -> int:
        return sum(1 for _ in jsonl.FORMAT.parts(segment))

    tracemalloc.start()
    try:
        assert count() == 10_000
        assert tracemalloc.get_traced_memory()[1] < 8 << 20
    finally:
        tracemalloc.stop()
    long = tmp_path / "long.json"
    long.write_text('[{"text": "' + "x" * 3_000_000 + '"}]')
    out = _parts(long, max_uncut_bytes=1 << 20)
    assert out[-1] == (
        f"UserError: {long}: element 1 of its JSON array is longer than "
        "source.max_uncut_bytes=1048576 bytes (not ended within them); an element "
        "is held whole to be read: raise source.max_uncut_bytes, or split the document"
    )


@pytest.mark.parametrize("ended", [True, False])
def test_a_long_array_element_is_called_long_through_the_cli(tmp_path, ended):
    """A valid element over source.max_uncut_bytes was "not valid JSON" (not ended within the
    bytes held) or "raise source.max_uncut_bytes, or split it; fix the file" (ended): one
    advice, the JSON line's, whichever read found it."""
    path = tmp_path / "long.json"
    path.write_text(json.dumps([{"text": "x" * (3000 if ended else 3_000_000)}]))
    out = tmp_path / "out"
    limit = 1000 if ended else 1 << 20
    proc = run_cli("source=file", f"source.path={path}", "tokenizer=char", f"out_dir={out}",
                   f"source.max_uncut_bytes={limit}", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1
    what = (
        "3,012 bytes, longer than source.max_uncut_bytes=1000"
        if ended
        else ("longer than source.max_uncut_bytes=1048576 bytes (not ended within them)")
    )
    assert proc.stderr.strip().splitlines() == [
        f"corpusprep: error: {path}: element 1 of its JSON array is {what}; an element is "
        "held whole to be read: raise source.max_uncut_bytes, or split the document"
    ], proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("sep", [" ", "\r", "\t", "  \r", "\r\n"])
def test_several_objects_on_a_line_or_lines_ended_by_cr(tmp_path, monkeypatch, sep):
    path = tmp_path / "several.jsonl"
    path.write_text(sep.join(json.dumps({"text": d}) for d in DOCS) + sep + "\n")
    fast = _parts(path)
    monkeypatch.setattr(jsonl, "_FAST_LOADS", None)
    assert fast == _parts(path) == DOCS


def test_a_bad_object_after_a_good_one_names_the_line(tmp_path):
    path = tmp_path / "several.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"} {"body": "c"}\n{"text": "b"} nope\n')
    assert _parts(path)[-1] == f"UserError: {path}:2: no field 'text' (found ['body']); set " \
        "source.text_field to the key that holds the text"  # fmt: skip
    path.write_text('{"text": "a"}\n{"text": "b"} nope\n')
    assert _parts(path)[-1] == f"UserError: {path}:2: not valid JSON (Expecting value, " \
        "column 15); fix or remove the line"  # fmt: skip


@pytest.mark.parametrize("block", range(1, 10))
def test_a_number_cut_by_a_block_is_read_whole(tmp_path, monkeypatch, block):
    """raw_decode reads "1." as 1: a number at the end of what is read waits for more."""
    monkeypatch.setattr(jsonl, "ARRAY_BLOCK", block)
    path = tmp_path / "n.json"
    for number in ("1.5", "-2e-3", "12345", "7E+2"):
        path.write_text(f'["ab", {number}]')
        found = type(json.loads(number)).__name__
        assert _parts(path)[-1].endswith(f"element 2 of its JSON array: no field 'text' (found "
                                         f"{found}); set source.text_field to the key that "
                                         "holds the text"), (number, _parts(path))  # fmt: skip


@pytest.mark.parametrize("head", ["\ufeff", "\n", " \r\n\t", "\ufeff\n  "])
def test_a_bom_or_whitespace_before_the_array(tmp_path, head):
    """datasets reads these as arrays too."""
    path = tmp_path / "a.json"
    path.write_text(head + json.dumps([{"text": d} for d in DOCS]), encoding="utf-8")
    assert _parts(path) == DOCS


def test_only_json_files_are_looked_at_for_an_array(tmp_path):
    """A .jsonl file is JSON Lines whatever its first byte (its lines are never arrays)."""
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps([{"text": "x"}]) + "\n")
    assert _parts(path)[-1].endswith(
        "a.jsonl:1: no field 'text' (found list); set "
        "source.text_field to the key that holds the text"
    )


def test_a_broken_element_is_reported_at_once(tmp_path, monkeypatch):
    """Not read on to source.max_uncut_bytes (or the end) and called too long."""
    monkeypatch.setattr(jsonl, "ARRAY_BLOCK", 64)
    path = tmp_path / "b.json"
    path.write_text('[{"text": tru}, ' + ", ".join([json.dumps({"text": "y" * 100})] * 5000) + "]")
    reads = []
    real = jsonl._Elements._more
    monkeypatch.setattr(
        jsonl._Elements, "_more", lambda self, *a: reads.append(1) or real(self, *a)
    )
    assert "element 1 of its JSON array: not valid JSON (Expecting value); fix" in _parts(path)[-1]
    assert len(reads) < 5


def test_an_array_of_strings_needs_the_text_field(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(DOCS))
    assert (
        "a string, read as a 'text' field; set source.text_field=text"
        in _parts(path, text_field="content")[-1]
    )


@pytest.mark.parametrize("scale", [1.05, 1.9])
@pytest.mark.parametrize("char", ["x", "😀"])
def test_an_element_longer_than_max_uncut_bytes_is_refused(tmp_path, scale, char):
    """An attack: the limit was checked before the read that doubled what is held (an
    element up to twice it got through), and in characters (4 bytes each at most)."""
    limit = 1 << 20
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"text": char * int(limit * scale / len(char.encode()))}],
                               ensure_ascii=False))  # fmt: skip
    out = _parts(path, max_uncut_bytes=limit)
    assert "element 1 of its JSON array is longer than" in out[-1], out[-1][:200]
    assert "not valid" not in out[-1]  # it is valid: only long
    assert f"source.max_uncut_bytes={limit}" in out[-1]
    fits = tmp_path / "fits.json"
    fits.write_text(json.dumps([{"text": char * int(limit * 0.9 / len(char.encode()))}],
                               ensure_ascii=False))  # fmt: skip
    assert len(_parts(fits, max_uncut_bytes=limit)[0]) == int(limit * 0.9 / len(char.encode()))


@pytest.mark.parametrize("limit", [1000, 1 << 20])
def test_the_bound_holds_wherever_an_element_falls(tmp_path, limit):
    """A review: an element that arrived whole within one read was never measured (with a
    limit under a block, elements 1-209 of 300 passed, 210 did not); and at exactly the
    limit: `limit` bytes of element pass, `limit + 1` do not, as for a JSON line."""
    path = tmp_path / "many.json"
    text = "y" * (limit * 5)
    path.write_text(json.dumps([{"text": text}] * 3))
    assert "element 1 of its JSON array" in _parts(path, max_uncut_bytes=limit)[-1]
    overhead = len(json.dumps({"text": ""}))  # the element is the object, braces and all
    for size, ok in ((limit, True), (limit + 1, False)):
        path.write_text(json.dumps([{"text": "z" * (size - overhead)}]))
        out = _parts(path, max_uncut_bytes=limit)
        assert (out == ["z" * (size - overhead)]) == ok, (size, out[-1][:120])


@pytest.mark.parametrize("line", [b"\x0c", b"\x0b", b" \x0c\t"])
def test_a_line_of_what_is_not_json_whitespace_is_not_json(tmp_path, line):
    """Only JSON's whitespace (space, tab, CR, LF) makes a blank line, skipped: a form feed
    or vertical tab is not valid JSON, refused by json and by datasets (pyarrow's reader);
    bytes.strip() took it for blank, and the line was left out without a word."""
    path = tmp_path / "ff.jsonl"
    path.write_bytes(b'{"text": "a"}\n' + line + b'\n{"text": "b"}\n \t\r\n')
    out = _parts(path)
    assert out[:-1] == ["a"]
    assert out[-1].startswith(f"UserError: {path}:2: not valid JSON (Expecting value, column ")

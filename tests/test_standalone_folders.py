"""An output folder stands on its own: a tokenizer file the run was *given* (tokenizer=hf's
tokenizer.json, tiktoken's tokenizer.ranks_file) is kept in the folder too, so the folder
loads, decodes and is reused on another machine, where that file's path means nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_one_line_error, compose, run_cli, without_kept_copies

import corpusprep
from corpusprep.errors import UserError
from corpusprep.prepare import prepare

TEXT = "".join(f"Line {i}: the king and queen were there, {i * 7} of them.\n" for i in range(400))
R50K = "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"  # r50k_base's file in the tiktoken cache


def _prepare(out, src, *overrides):
    return prepare(compose("source=file", f"source.path={src}", f"out_dir={out}", "quiet=true",
                           *overrides))  # fmt: skip


def _moved(folder, to):
    """The folder as another machine has it: copied, and the original gone."""
    shutil.copytree(folder, to)
    shutil.rmtree(folder)
    return to


@pytest.fixture
def tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizer=hf needs tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    tok.train_from_iterator(TEXT.splitlines(keepends=True), trainer)
    path = tmp_path / "given" / "my-tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


@pytest.fixture
def ranks_file(tmp_path, tiktoken_cache):
    path = tmp_path / "given" / "mine.tiktoken"
    path.parent.mkdir(exist_ok=True)
    shutil.copy(tiktoken_cache / R50K, path)
    return path


def _hf(path):
    return ("tokenizer=hf", f"tokenizer.path={path}")


def _tiktoken(path):
    return ("tokenizer=tiktoken", "tokenizer.encoding=r50k_base", f"tokenizer.ranks_file={path}")


CASES = {"hf": (_hf, "tokenizer_json", "tokenizer.json"),
         "tiktoken": (_tiktoken, "ranks_file", "tokenizer.tiktoken")}  # fmt: skip


@pytest.fixture(params=sorted(CASES))
def given(request):
    """(the tokenizer's overrides, the file it was given, the name its copy has)"""
    args, fixture, kept = CASES[request.param]
    path = request.getfixturevalue(fixture)
    return args(path), path, kept


def test_the_given_file_is_kept_in_the_folder_and_listed(tmp_path, given):
    args, path, kept = given
    (tmp_path / "t.txt").write_text(TEXT)
    made = _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    assert (tmp_path / "out" / kept).read_bytes() == path.read_bytes()
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["files"][kept] == path.stat().st_size == made["files"][kept]
    assert manifest["checksums"][kept] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_moved_folder_loads_and_decodes_without_the_given_file(tmp_path, given):
    args, path, _ = given
    (tmp_path / "t.txt").write_text(TEXT)
    _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    shutil.rmtree(path.parent)  # the other machine has no such file
    ds = corpusprep.load(_moved(tmp_path / "out", tmp_path / "elsewhere"))
    assert ds.tokenizer.decode(np.concatenate([ds.train, ds.val]).tolist()) == TEXT


def test_a_moved_folder_is_reused_and_the_new_folder_stands_alone_too(tmp_path, given):
    args, path, kept = given
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "b.txt").write_text(TEXT[::-1])
    _prepare(tmp_path / "a", tmp_path / "a.txt", *args)
    _prepare(tmp_path / "direct", tmp_path / "b.txt", *args)  # what the reuse must give
    expected = corpusprep.load(tmp_path / "direct")
    expected = np.concatenate([expected.train, expected.val]).tolist()
    shutil.rmtree(path.parent)
    a = _moved(tmp_path / "a", tmp_path / "a_moved")
    result = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse",
                     f"tokenizer.dir={a}", "out_dir=b", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "b" / kept).read_bytes() == (a / kept).read_bytes()
    shutil.rmtree(a)  # the reused folder goes too: b still loads
    ds = corpusprep.load(_moved(tmp_path / "b", tmp_path / "b_moved"))
    assert np.concatenate([ds.train, ds.val]).tolist() == expected


def test_a_kept_copy_that_was_changed_is_refused_in_one_line(tmp_path, given):
    args, path, kept = given
    (tmp_path / "t.txt").write_text(TEXT)
    _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    copy = tmp_path / "out" / kept
    copy.write_bytes(copy.read_bytes().replace(b"2", b"3", 1))  # a vocabulary edited
    with pytest.raises(UserError, match=kept):
        corpusprep.load(tmp_path / "out")
    result = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("corpusprep.inspect: error: ") and kept in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_kept_copy_is_named_in_one_line(tmp_path, given):
    args, path, kept = given
    (tmp_path / "t.txt").write_text(TEXT)
    _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    (tmp_path / "out" / kept).unlink()
    result = run_cli("source=file", "source.path=t.txt", "tokenizer=reuse",
                     "tokenizer.dir=out", "out_dir=b", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(result, f"out/{kept}: missing", "prepare the folder again")


def test_a_folder_made_before_the_copy_was_kept_is_made_again(tmp_path, given, monkeypatch):
    """A folder made before the copy was kept (none there or described): redone, to get one."""
    args, path, kept = given
    (tmp_path / "t.txt").write_text(TEXT)
    with without_kept_copies(monkeypatch):
        _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    assert not (tmp_path / "out" / kept).exists()
    again = _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    assert not again.get("skipped")
    assert (tmp_path / "out" / kept).read_bytes() == path.read_bytes()
    assert _prepare(tmp_path / "out", tmp_path / "t.txt", *args).get("skipped")


def test_a_manifest_naming_another_kept_file_is_one_line(tmp_path, given):
    """A stranger's manifest may name any path as the kept file: only the names the
    tokenizers keep are read, anything else is one line naming the key."""
    args, path, kept = given
    (tmp_path / "t.txt").write_text(TEXT)
    _prepare(tmp_path / "out", tmp_path / "t.txt", *args)
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["tokenizer"]["file"] = "../../etc/passwd"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"tokenizer.file='../../etc/passwd' is not a file a"):
        corpusprep.load(tmp_path / "out")

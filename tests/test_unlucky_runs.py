"""What other processes do to a run's files while it works: its out_dir moved or removed,
its input removed or changed, a file-size limit, another run committing while a reader
loads the folder. Each is one line (or a right answer), never a traceback, a retry that
cannot help, or a wrong record. Found by an attack from outside (kills, full disks,
readers during commits); tests/stage_faults.py does the fault at a chosen stage."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_one_line_error

from corpusprep.errors import INTERRUPTED_AFTER_COMMIT

SHAKESPEARE = REPO / "corpusprep" / "data" / "tinyshakespeare.txt.xz"


def shakespeare() -> bytes:
    import lzma

    return lzma.decompress(SHAKESPEARE.read_bytes())


def cli(*args: str, cwd: Path, fault: str | None = None, limit_bytes: int | None = None):
    """The real command line in a fresh process (tests/stage_faults.py), no compose cache."""
    env = {**os.environ, "CORPUSPREP_COMPOSE_CACHE": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}  # fmt: skip
    if fault:
        env["CORPUSPREP_FAULT"] = fault

    def limit() -> None:  # ulimit -f in the child only
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, str(REPO / "tests" / "stage_faults.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit if limit_bytes else None)  # fmt: skip


def documents(path: Path, copies: int = 3) -> Path:
    parts = shakespeare().decode().split("\n\n")
    with open(path, "w") as f:
        for i in range(copies):
            f.writelines(json.dumps({"text": f"{part} {i}"}) + "\n" for part in parts)
    return path


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("stage", ["encode", "commit"])
def test_a_sigterm_whose_handler_ran_inside_a_callback_still_stops_the_run(tmp_path, stage):
    """A signal's handler runs at the main thread's next step, wherever that is: inside a
    weakref's callback or a __del__ (the pool's own WeakSet, as the encoding started), its
    KeyboardInterrupt was printed as "Exception ignored" and lost, and a SIGTERMed run went
    on to commit and exit 0 (found by SIGTERMs at random moments: 1 in 20 bpe runs)."""
    (tmp_path / "small.txt").write_bytes(shakespeare()[:300_000])
    done = cli("source=file", "source.path=small.txt", "out_dir=out", cwd=tmp_path,
               fault=f"{stage}:sigterm_in_callback")  # fmt: skip
    assert done.returncode == 143, done.stderr
    said = done.stderr.splitlines()[-1]
    assert said.startswith("corpusprep: error: interrupted"), done.stderr
    assert "Traceback" not in done.stderr and "ignored" not in done.stderr, done.stderr
    # sent again once the callback is over: a small commit may be done by then (and it says so)
    if stage == "encode" or not said.endswith(INTERRUPTED_AFTER_COMMIT):
        assert not (tmp_path / "out" / "train.bin").exists()


def test_a_run_that_fails_in_its_commit_does_not_say_it_replaces(tmp_path):
    """outputs.md: a run that fails replaces nothing, and says only its error."""
    (tmp_path / "small.txt").write_bytes(shakespeare()[:300_000])
    args = ("source=file", "source.path=small.txt", "out_dir=out", "quiet=true")
    assert cli(*args, cwd=tmp_path).returncode == 0
    before = digests(tmp_path / "out")
    (tmp_path / "out" / "small_train_000001.bin").mkdir()  # where format=llmc puts a file
    failed = cli(*args, "format=llmc", cwd=tmp_path)
    assert_one_line_error(failed, "small_train_000001.bin is a folder")
    assert digests(tmp_path / "out") == before


@pytest.mark.parametrize("limit_kb", [1000, 100])  # hit while merging; while encoding
def test_a_file_size_limit_is_one_line_never_tried_again(tmp_path, limit_kb):
    documents(tmp_path / "docs.jsonl")
    args = ("source=file", "source.path=docs.jsonl", "quiet=true", "out_dir=out")
    assert cli(*args, "tokenizer=byte", cwd=tmp_path).returncode == 0
    before = digests(tmp_path / "out")
    failed = cli(*args, "tokenizer=tiktoken", cwd=tmp_path, limit_bytes=limit_kb << 10)
    assert_one_line_error(failed, "larger than", "ulimit -f")
    assert "trying again" not in failed.stderr
    assert digests(tmp_path / "out") == before


@pytest.mark.parametrize("fault", ["encode:move_out_dir", "merge_parts:move_out_dir",
                                   "merge_parts:remove_out_dir", "export:move_out_dir",
                                   "commit:remove_out_dir"])  # fmt: skip
def test_an_out_dir_moved_away_mid_run_is_one_line(tmp_path, fault):
    documents(tmp_path / "docs.jsonl")
    failed = cli("source=file", "source.path=docs.jsonl", "tokenizer=tiktoken", "order=shuffle",
                 "shard_bytes=1048576", "out_dir=out", "quiet=true", cwd=tmp_path,
                 fault=fault)  # fmt: skip
    assert_one_line_error(failed, "out_dir=out: the folder was moved or removed during the run")
    assert "trying again" not in failed.stderr


@pytest.mark.parametrize("stage", ["encode", "export"])
def test_a_run_whose_out_dir_was_moved_leaves_the_next_runs_folder_alone(tmp_path, stage):
    """out_dir moved away mid-run, and another run started in a new folder by that name:
    the first run's end removed that run's lock file (by its name), its work folder (the
    same key) and then the folder itself, and a third run could write there beside the
    second (found by an attack)."""
    documents(tmp_path / "docs.jsonl", copies=1)
    failed = cli("source=file", "source.path=docs.jsonl", "shard_bytes=300000", "out_dir=out",
                 "quiet=true", cwd=tmp_path, fault=f"{stage}:move_out_dir_relocked")  # fmt: skip
    assert_one_line_error(failed, "out_dir=out: ", "run again")
    assert (tmp_path / "out" / ".corpusprep.lock").is_file()
    if stage == "export":  # the work folder is known by then
        assert [p.name for p in (tmp_path / "out" / ".corpusprep-work").glob("*/*")] == ["theirs"]


@pytest.mark.parametrize("stage", ["encode", "merge_parts", "export"])
def test_an_input_removed_mid_run_is_one_line_or_not_needed(tmp_path, stage):
    """Before the encode has read it: the one line safety.md promises. After: the outputs
    were made from the bytes read (and hashed) before, and the run ends well."""
    (tmp_path / "in.txt").write_bytes(shakespeare() * 4)
    reference = cli("source=file", "source.path=in.txt", "out_dir=ref", "quiet=true", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    result = cli("source=file", "source.path=in.txt", "shard_bytes=1048576", "out_dir=out",
                 "quiet=true", cwd=tmp_path, fault=f"{stage}:remove_input")  # fmt: skip
    if stage == "encode":
        assert_one_line_error(result, "in.txt: the file was removed while it was being read")
        assert "trying again" not in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        ref = json.loads((tmp_path / "ref" / "manifest.json").read_text())
        made = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert made["checksums"] == ref["checksums"] and made["source"]["bytes"] == len(
            shakespeare() * 4
        )


@pytest.mark.parametrize("change", ["truncate_input", "append_input"])
def test_the_manifest_gives_the_size_of_the_input_it_was_made_from(tmp_path, change):
    original = shakespeare() * 4
    (tmp_path / "in.txt").write_bytes(original)
    done = cli("source=file", "source.path=in.txt", "shard_bytes=1048576", "out_dir=out",
               "quiet=true", cwd=tmp_path, fault=f"merge_parts:{change}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    source = json.loads((tmp_path / "out" / "manifest.json").read_text())["source"]
    assert source["sha256"] == hashlib.sha256(original).hexdigest()
    assert source["bytes"] == source["files"][0]["bytes"] == len(original)


def test_load_never_pairs_a_manifest_with_another_runs_files(tmp_path, monkeypatch):
    """Another run commits between a reader's manifest read and its opening the files:
    the reader reads again (the new run's files, with their manifest), never a mix."""
    import corpusprep
    import corpusprep.dataset as dataset

    text = shakespeare().decode()[:500_000]
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text(text[::-1])  # the same size, the same characters
    args = ("source=file", "name=r", "out_dir=out", "quiet=true")
    assert cli(*args, "source.path=a.txt", cwd=tmp_path).returncode == 0
    real, commits = dataset.read_manifest, []

    def read_then_another_run_commits(folder):
        manifest = real(folder)
        if not commits:  # once: the second read sees the folder settled
            commits.append(cli(*args, "source.path=b.txt", cwd=tmp_path))
            assert commits[0].returncode == 0, commits[0].stderr
        return manifest

    monkeypatch.setattr(dataset, "read_manifest", read_then_another_run_commits)
    ds = corpusprep.load(tmp_path / "out", tokenizer=False)
    assert commits
    got = hashlib.sha256(np.asarray(ds.train).tobytes()).hexdigest()
    assert got == ds.manifest["checksums"]["train.bin"]
    assert ds.manifest["source"]["files"][0]["path"].endswith("b.txt")


def test_a_loaded_sharded_split_never_reads_a_later_runs_shards(tmp_path):
    """A sharded split maps its files when read, after load: another run that commits in
    between must not have its shards read under the loaded manifest (their ids, as the
    first run's), nor a shorter file end in numpy's mmap error."""
    import glob

    import corpusprep
    from corpusprep.errors import UserError

    text = shakespeare().decode()[:200_000]
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text(text[::-1])  # the same size, other ids
    args = ("source=file", "name=r", "out_dir=out", "quiet=true", "format=npy",
            "shard_tokens=20000")  # fmt: skip
    assert cli(*args, "source.path=a.txt", cwd=tmp_path).returncode == 0
    ds = corpusprep.load(tmp_path / "out", tokenizer=False, check_ids=False)
    old = np.concatenate([np.load(f) for f in sorted(glob.glob(f"{tmp_path}/out/*train*.npy"))])
    again = cli(*args, "source.path=b.txt", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    try:
        got = np.asarray(ds.train)
    except UserError as e:
        assert "load it again" in str(e) and "\n" not in str(e)
    else:
        assert np.array_equal(got, old)


def test_a_file_a_worker_misses_is_final_only_if_the_driver_misses_it_too(tmp_path):
    """A worker on another node may not see a file the driver sees (a shared file system
    catching up): that is tried again, as any failure; gone for the driver too, it is not."""
    from corpusprep.executors import _settled, _Vanished

    there = tmp_path / "there"
    there.write_text("x")
    retried = _settled(_Vanished("No such file or directory", str(there)))
    assert isinstance(retried, FileNotFoundError) and retried.filename == str(there)
    assert isinstance(_settled(_Vanished("No such file or directory", None)), FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        _settled(_Vanished("No such file or directory", str(tmp_path / "gone")))


def test_load_waits_for_a_commit_under_way(tmp_path, monkeypatch):
    """A commit removes the manifest first and puts it back last: a reader that comes
    meanwhile reads again, and once the commit is done, loads the folder; a commit a
    killed run left half done is one line saying so."""
    import threading

    import corpusprep
    from corpusprep.errors import UserError
    from corpusprep.writer import JOURNAL

    (tmp_path / "t.txt").write_bytes(shakespeare()[:200_000])
    assert cli("source=file", "source.path=t.txt", "out_dir=out", "quiet=true",
               cwd=tmp_path).returncode == 0  # fmt: skip
    out = tmp_path / "out"
    (out / "manifest.json").rename(tmp_path / "manifest.json")
    (out / JOURNAL).write_text("{}")  # as a commit has it between its first and last step
    done = threading.Timer(0.1, lambda: ((tmp_path / "manifest.json").rename(
        out / "manifest.json"), (out / JOURNAL).unlink()))  # fmt: skip
    done.start()
    try:
        assert len(corpusprep.load(out, tokenizer=False).train) > 0
    finally:
        done.join()
    (out / "manifest.json").rename(tmp_path / "manifest.json")
    (out / JOURNAL).write_text("{}")  # and it stays so: a killed commit
    with pytest.raises(UserError, match="a killed run left one half done"):
        corpusprep.load(out, tokenizer=False)


def test_load_when_a_commit_ends_between_its_manifest_read_and_the_journal_check(
    tmp_path, monkeypatch
):
    """An attack: the manifest was missing (a commit under way), then the commit ended and
    took its journal away before load looked for it: a finished folder said 'no manifest'."""
    import corpusprep
    import corpusprep.dataset as dataset
    from corpusprep.writer import JOURNAL

    (tmp_path / "t.txt").write_bytes(shakespeare()[:200_000])
    assert cli("source=file", "source.path=t.txt", "out_dir=out", "quiet=true",
               cwd=tmp_path).returncode == 0  # fmt: skip
    out = tmp_path / "out"
    (out / "manifest.json").rename(tmp_path / "manifest.json")
    (out / JOURNAL).write_text("{}")
    real = dataset.read_manifest

    def missing_then_the_commit_ends(folder):
        try:
            return real(folder)
        finally:
            if (tmp_path / "manifest.json").exists():
                (tmp_path / "manifest.json").rename(out / "manifest.json")
                (out / JOURNAL).unlink()

    monkeypatch.setattr(dataset, "read_manifest", missing_then_the_commit_ends)
    assert len(corpusprep.load(out, tokenizer=False).train) > 0

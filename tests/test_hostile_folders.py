"""A stranger's out_dir (a copied or downloaded folder, a shared one) cannot make a run touch
anything outside it, hang, or leave a folder that no run can finish: planted symlinks (the
lock, the work folder), a planted commit journal, special files (FIFOs, devices) and folders
where a manifest lists files. Found by an attack on stop 44's checkout; each case is that
attack's reproduction, through the real command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_cli

SMALL = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 1000


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, list[str]]:
    """A finished char-level folder `out` and the arguments that made it (and find it up to
    date again)."""
    (tmp_path / "small.txt").write_text(SMALL)
    args = ["source=file", "source.path=small.txt", "out_dir=out"]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "out", args


def _edit_manifest(folder: Path, edit) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def test_a_planted_lock_symlink_is_not_followed(made, tmp_path):
    out, args = made
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT USER DATA\n")
    (out / ".corpusprep.lock").symlink_to(victim)
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stdout
    assert victim.read_text() == "IMPORTANT USER DATA\n"
    dangling = tmp_path / "made-by-the-lock.txt"
    (out / ".corpusprep.lock").unlink(missing_ok=True)
    (out / ".corpusprep.lock").symlink_to(dangling)
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    assert not dangling.exists()


def test_a_planted_lock_fifo_neither_hangs_nor_stops_the_run(made, tmp_path):
    out, args = made
    os.mkfifo(out / ".corpusprep.lock")
    r = run_cli(*args, "force=true", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_planted_journal_cannot_move_a_file_from_outside(made, tmp_path):
    out, args = made
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    (elsewhere / ".secret.1-abcdef.tmp").write_text("VICTIM DATA\n")
    journal = {"renames": [["../victim/.secret.1-abcdef.tmp", "stolen.txt"]], "obsolete": []}
    (out / ".corpusprep-commit.json").write_text(json.dumps(journal))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (elsewhere / ".secret.1-abcdef.tmp").read_text() == "VICTIM DATA\n"
    assert not (out / "stolen.txt").exists()
    assert not (out / ".corpusprep-commit.json").exists()


def test_a_symlinked_work_folder_writes_nothing_elsewhere(tmp_path):
    docs = "".join(json.dumps({"text": p}) + "\n" for p in SMALL.split("hear"))
    (tmp_path / "docs.jsonl").write_text(docs)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".corpusprep-work").symlink_to(elsewhere)
    r = run_cli("source=file", "source.path=docs.jsonl", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "out" / ".corpusprep-work").exists()


@pytest.mark.parametrize("special", ["fifo", "dev_zero"])
def test_a_special_file_a_manifest_lists_is_changed_not_read(made, tmp_path, special):
    out, args = made
    if special == "fifo":
        os.mkfifo(out / "extra.bin")
    else:
        (out / "extra.bin").symlink_to("/dev/zero")
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    def list_it(m):
        m["files"]["extra.bin"] = 0
        m["checksums"]["extra.bin"] = empty

    _edit_manifest(out, list_it)
    r = run_cli(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "up to date" not in r.stdout
    assert not (out / "extra.bin").exists() and not (out / "extra.bin").is_symlink()


def test_a_folder_a_manifest_lists_as_a_file_does_not_jam_the_folder(made, tmp_path):
    out, args = made
    (out / "adir").mkdir()
    (out / "adir" / "theirs.txt").write_text("kept\n")

    def list_it(m):
        m["files"]["adir"] = 5
        m["checksums"]["adir"] = "00"

    _edit_manifest(out, list_it)
    for _ in range(2):  # and the run after it: nothing left half done
        r = run_cli(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (out / "manifest.json").is_file()
        assert not (out / ".corpusprep-commit.json").exists()
    assert (out / "adir" / "theirs.txt").read_text() == "kept\n"
    assert "up to date" in r.stdout


def test_a_folder_where_a_commit_puts_a_file_is_one_line_and_the_output_kept(made, tmp_path):
    out, args = made
    (out / "token_bytes.npy").unlink()
    (out / "token_bytes.npy").mkdir()
    before = (out / "train.bin").read_bytes()
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r, "token_bytes.npy", "folder")
    assert (out / "train.bin").read_bytes() == before
    assert (out / "manifest.json").is_file()
    assert not (out / ".corpusprep-commit.json").exists()


def test_a_file_name_that_is_not_utf8_is_one_line(tmp_path):
    """A name made on another system (Latin-1 é as one byte): corpusprep's manifest and
    messages are UTF-8, so it says which file, rather than a UnicodeEncodeError traceback."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "b.txt").write_text(SMALL)
    (folder / os.fsdecode(b"caf\xe9.txt")).write_text(SMALL)
    r = run_cli("source=files", "source.glob=in/*.txt", "out_dir=out", cwd=tmp_path)
    assert_one_line_error(r, "caf\\xe9.txt", "not UTF-8", "rename it")
    assert not (tmp_path / "out").exists()


# the attack's Parquet bomb, before max_uncut_bytes held for Parquet, ended in "failed 3
# times; last: MemoryError(...); run the same command again": the same again fails the same
def test_a_shard_out_of_memory_says_how_to_need_less(tmp_path):
    from helpers import FAULTS

    (tmp_path / "small.txt").write_text(SMALL)
    r = run_cli("source=file", "source.path=small.txt", "out_dir=out", "executor.retries=0",
                "tokenizer._target_=fault_tokenizers.OutOfMemoryCharTokenizer",
                cwd=tmp_path, env=FAULTS)  # fmt: skip
    assert_one_line_error(r, "out of memory", "executor.workers", "source.max_uncut_bytes")
    assert "run the same command again" not in r.stderr


# an attack: a manifest that no longer lists train.bin (gone), or lists a cut one with its
# size and sha256, still passed the up-to-date check; a folder is up to date only if it
# also loads as the dataset its manifest describes (each side's ids, its tokens)
@pytest.mark.parametrize("damage", ["unlisted_and_gone", "cut_and_relisted"])
def test_a_folder_whose_outputs_do_not_add_up_is_not_up_to_date(made, tmp_path, damage):
    import hashlib

    out, args = made
    train = out / "train.bin"
    whole = train.read_bytes()
    if damage == "unlisted_and_gone":
        train.unlink()

        def relist(m):
            del m["files"]["train.bin"], m["checksums"]["train.bin"]
    else:
        train.write_bytes(whole[:1000])

        def relist(m):
            m["files"]["train.bin"] = 1000
            m["checksums"]["train.bin"] = hashlib.sha256(whole[:1000]).hexdigest()

    _edit_manifest(out, relist)
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "up to date" not in r.stdout
    assert train.read_bytes() == whole


# an attack: an input file with a 250-character name (the run's default name is its stem)
# made format=npy and megatron fail with ENAMETOOLONG as they wrote, a traceback
@pytest.mark.parametrize("fmt", ["npy", "llmc", "megatron"])
def test_a_name_too_long_for_the_format_files_is_one_line_before_any_work(tmp_path, fmt):
    long = tmp_path / ("a" * 250 + ".txt")
    long.write_text(SMALL)
    r = run_cli("source=file", f"source.path={long.name}", f"format={fmt}", "out_dir=out",
                cwd=tmp_path)  # fmt: skip
    assert_one_line_error(r, "too long", "name=aaaa")
    assert not (tmp_path / "out").exists()
    r = run_cli("source=file", f"source.path={long.name}", f"format={fmt}", "out_dir=out",
                "name=" + "a" * 40, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr


# an attack: a folder's manifest (or tokenizer.path) could name any file, which the hf
# tokenizer read whole (350 MB of memory for a 300 MB file), or a FIFO, whose read blocks
@pytest.mark.parametrize("planted", ["fifo", "too big"])
def test_a_tokenizer_json_is_a_regular_file_of_a_plausible_size(tmp_path, planted):
    pytest.importorskip("tokenizers")
    from corpusprep.errors import UserError
    from corpusprep.tokenizers.hf import HfTokenizer

    path = tmp_path / "tokenizer.json"
    if planted == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(300 << 20)  # sparse: nothing written
    with pytest.raises(UserError, match="tokenizer.path=.*not a regular file of at most 256 MB"):
        HfTokenizer(str(path))


# --- a review of the fixes above -------------------------------------------------------------


def test_a_folder_of_links_loads_and_is_up_to_date(made, tmp_path):
    """huggingface_hub.snapshot_download (and DVC, git-annex) give a folder whose files are
    links into a store of blobs: reading follows them, as long as each leads to a regular
    file; a re-run finds the folder up to date and leaves the links be."""
    import corpusprep

    out, args = made
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for path in sorted(out.iterdir()):
        if path.is_file():
            path.rename(blobs / path.name)
            path.symlink_to(blobs / path.name)
    ds = corpusprep.load(out)
    assert len(ds.train) == ds.manifest["tokens"]["train"]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stdout
    assert (out / "train.bin").is_symlink()


@pytest.mark.parametrize("name", ["manifest.json", ".corpusprep-commit.json"])
def test_a_fifo_for_the_manifest_or_the_journal_does_not_hang_the_run(made, tmp_path, name):
    out, args = made
    (out / name).unlink(missing_ok=True)
    os.mkfifo(out / name)
    r = run_cli(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (out / "manifest.json").is_file()


def test_a_format_load_cannot_read_is_still_up_to_date(made, tmp_path):
    """A plugin's format: the up-to-date check has its checksums, not corpusprep.load."""
    out, args = made
    _edit_manifest(out, lambda m: m["format"].update(kind="someones_plugin"))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stdout


def test_a_folder_made_with_a_fractional_val_size_verifies(tmp_path):
    docs = "".join(json.dumps({"text": f"document {i}: " + SMALL[: 200 + i]}) + "\n"
                   for i in range(300))  # fmt: skip
    (tmp_path / "d.jsonl").write_text(docs)
    r = run_cli("source=file", "source.path=d.jsonl", "split_by=document", "val_size=0.1",
                "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    import subprocess
    import sys

    v = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "out", "--verify"],
                       cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert v.returncode == 0, v.stderr


def test_a_shared_download_cache_keeps_files_others_can_read(tmp_path, cache_dir):
    """mkstemp makes its file the user's alone (0600): the cached copy gets the umask's mode,
    as any file the user writes, so others sharing the cache can use it."""
    old = os.umask(0o022)
    try:
        r = run_cli("dataset=shakespeare_char", "out_dir=out", cwd=tmp_path)
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    (cached,) = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    assert cached.stat().st_mode & 0o777 == 0o644


def _crashed(tmp_path: Path, reference: bool = False) -> list[str]:
    """400 documents in several shards, a run into out_dir=out killed halfway (its finished
    shards left in the work folder), and `ref` made whole if asked; returns the arguments
    that resume it."""
    from helpers import crash_after_documents

    rows = [json.dumps({"text": f"doc {i} " + "words " * (i % 40)}) for i in range(400)]
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    args = ["source=file", "source.path=d.jsonl", "tokenizer=tiktoken", "shard_bytes=4000",
            "executor.workers=1", "quiet=true"]  # fmt: skip
    if reference:
        assert run_cli(*args, "out_dir=ref", cwd=tmp_path).returncode == 0
    return crash_after_documents(args, tmp_path)


# an attack: the work folder's key can be worked out (the input's stat, the config, the
# plan), so a folder planted under it, holding a part that links to a file elsewhere, had
# the run write its ids into that file; a resume removes every link there (not its target)
def test_a_work_folder_holding_links_is_not_written_through(tmp_path):
    from helpers import FAULTS, same_files

    args = _crashed(tmp_path, reference=True)
    parts = sorted((tmp_path / "out").rglob("*.part"))
    assert parts
    victim = tmp_path / "victim.txt"
    victim.write_text("precious victim data\n")
    for part in parts:  # finished ones (read back on a resume) and the one cut short
        part.unlink()
        part.symlink_to(victim)
    again = run_cli(*args, "out_dir=out", cwd=tmp_path, env=FAULTS)
    assert again.returncode == 0, again.stderr
    assert victim.read_text() == "precious victim data\n"
    same_files(tmp_path / "ref", tmp_path / "out", ("train.bin", "val.bin"))


# a review: the first version of the above wiped a work folder holding a folder, which
# Slurm's logs are (work/slurm/<job id>/): every Slurm resume started from nothing
def test_a_work_folder_keeps_its_finished_shards_and_its_folders(tmp_path):
    from helpers import FAULTS, same_files

    args = _crashed(tmp_path, reference=True)
    (work,) = (tmp_path / "out" / ".corpusprep-work").iterdir()
    (work / "slurm" / "1234").mkdir(parents=True)
    (work / "slurm" / "1234" / "log.out").write_text("a job's log\n")
    again = run_cli(*args, "out_dir=out", "quiet=false", cwd=tmp_path, env=FAULTS)
    assert again.returncode == 0, again.stderr
    assert "shards were done by an earlier run" in again.stderr
    same_files(tmp_path / "ref", tmp_path / "out", ("train.bin", "val.bin"))


# a review: a relative tokenizer.ranks_file was looked for where load() ran
def test_a_folder_made_with_a_relative_ranks_file_loads_from_anywhere(
    tmp_path, tiktoken_cache, monkeypatch
):
    import shutil

    from helpers import compose

    import corpusprep
    from corpusprep.prepare import prepare

    made_in, elsewhere = tmp_path / "made", tmp_path / "elsewhere"
    made_in.mkdir(), elsewhere.mkdir()
    shutil.copy(tiktoken_cache / "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4", made_in / "r.tiktoken")
    (made_in / "t.txt").write_text(SMALL)
    monkeypatch.chdir(made_in)
    prepare(compose("source=file", "source.path=t.txt", "out_dir=out", "quiet=true",
                    "tokenizer=tiktoken", "tokenizer.encoding=r50k_base",
                    "tokenizer.ranks_file=r.tiktoken"))  # fmt: skip
    monkeypatch.chdir(elsewhere)
    assert corpusprep.load(made_in / "out").tokenizer.decode([464]) == "The"


# a review: the ranks file's sha256 was taken once, then each worker read the file again
# unchecked; and a tokenizer rebuilt for a folder did not compare it with the manifest's
def test_a_ranks_file_that_changes_after_it_was_checked_is_refused(tmp_path, tiktoken_cache):
    import shutil

    from corpusprep.errors import UserError
    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    ranks = tmp_path / "r.tiktoken"
    shutil.copy(tiktoken_cache / "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4", ranks)
    tok = TiktokenTokenizer("r50k_base", ranks_file=str(ranks), backend="tiktoken")
    with pytest.raises(UserError, match="sha256 differs"):
        tok.restore({"ranks_sha256": "0" * 64})
    tok.restore({"ranks_sha256": tok.ranks_sha256})
    ranks.write_bytes(ranks.read_bytes()[:-40])  # as a worker would read it now
    with pytest.raises(UserError, match="changed since the run began"):
        tok._load_vocab()


# a review: JSON of small objects takes some 25 times its bytes ("[{},{},...]"): a 1 GB
# manifest.json, the size bound, could take 25 GB; and a deeply nested one was a
# RecursionError traceback in the up-to-date check
@pytest.mark.parametrize("bomb", ["objects", "nested"])
def test_a_manifest_made_to_fill_memory_is_not_read(made, tmp_path, bomb):
    import corpusprep
    from corpusprep.errors import UserError

    out, args = made
    text = "[" + "{}," * (22 << 20) + "{}]" if bomb == "objects" else "[" * 100_000
    (out / "manifest.json").write_text(text)
    with pytest.raises(UserError, match="memory" if bomb == "objects" else "not valid JSON"):
        corpusprep.load(out)
    r = run_cli(*args, cwd=tmp_path)  # not a finished run: done again
    assert r.returncode == 0, r.stderr
    assert "up to date" not in r.stdout and "Traceback" not in r.stderr
    assert json.loads((out / "manifest.json").read_text())["tokens"]


@pytest.mark.parametrize("name", [".corpusprep-commit.json", "inputs.json"])
def test_a_deeply_nested_journal_or_inputs_record_is_not_ours(made, tmp_path, name):
    from helpers import FAULTS

    if name == ".corpusprep-commit.json":
        out, args = made
        (out / name).write_text("[" * 100_000)
        r = run_cli(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert not (out / name).exists()
        return
    args = _crashed(tmp_path)
    (record,) = (tmp_path / "out").rglob(name)
    record.write_text("[" * 100_000)
    r = run_cli(*args, "out_dir=out", cwd=tmp_path, env=FAULTS)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_an_up_to_date_folder_s_manifest_cannot_fake_a_line_of_the_run(made, tmp_path):
    """Found by an attack: a finished folder found up to date is said so with the time its
    manifest records, a stranger's string in a shared or copied folder: its line end (the
    summary keeps its own) began a line of its own, here one that looks like an error."""
    out, args = made
    _edit_manifest(out, lambda m: m.update(created="2020\x1b]0;x\x07\ncorpusprep: error: fake"))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and "up to date" in lines[0], r.stdout
    assert "made 2020\\x1b]0;x\\x07\\ncorpusprep: error: fake)" in lines[0]


def test_a_replaced_folder_s_manifest_is_shown_escaped(made, tmp_path):
    """Found by an attack: a run replacing a folder made otherwise says what made it, from
    its manifest (a stranger's, in a shared or copied folder), which it printed raw: an
    escape sequence set the terminal's title, a line end split the line in two."""
    out, args = made

    def plant(m: dict) -> None:
        m["config"]["split"] = "\x1b]0;x\x07\ncorpusprep: error: fake"
        m["tokenizer"]["kind"] = "k\x9b2J"
        m["config"]["tokenizer"]["_target_"] = "other"

    _edit_manifest(out, plant)
    r = run_cli(*args, "split=0.8", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "replacing" in line]
    assert len(said) == 1, r.stderr
    assert "split=\\x1b]0;x\\x07\\ncorpusprep: error: fake" in said[0]
    assert "tokenizer=k\\x9b2J" in said[0]
    assert not set("\x1b\x07\x9b") & set(r.stderr), r.stderr


def test_a_lone_surrogate_in_an_up_to_date_folder_s_manifest_is_shown_escaped(made, tmp_path):
    """Found by an attack: JSON may spell a lone surrogate ("\\ud800"), which stdout cannot
    encode: the run found the folder up to date, then ended in a UnicodeEncodeError
    traceback printing so. Shown escaped, as inspect shows it."""
    out, args = made
    _edit_manifest(out, lambda m: m.update(created="2020\ud800"))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "made 2020\\ud800)" in r.stdout

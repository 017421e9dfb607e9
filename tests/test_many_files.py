"""A corpus of many small files (a code base, a folder of documents): the work done once per
file is kept to what each file needs, and gives what the slower, obvious way gave."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

import pytest

from corpusprep import _paths
from corpusprep._paths import real_paths
from corpusprep.redact import redact_text, redact_urls_and_pairs


def _tree(root: Path) -> list[str]:
    """Folders and files reached through links to folders, links to files, links to links,
    a dangling link, a loop, and paths with '.' and '..' in them; every path to try."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    for folder in ("a", "a/b", "c"):
        (root / folder / "f.txt").write_text("x")
    (root / "to_b").symlink_to(root / "a" / "b")
    (root / "c" / "up").symlink_to("..")  # relative, back to root
    (root / "c" / "g.txt").symlink_to("../a/f.txt")
    (root / "c" / "h.txt").symlink_to("g.txt")  # a link to a link
    (root / "c" / "gone.txt").symlink_to("nowhere.txt")
    (root / "loop").symlink_to("loop")
    names = ["f.txt", "g.txt", "h.txt", "gone.txt", "missing.txt", ".", "..", "up", "loop"]
    folders = ["a", "a/b", "c", "to_b", "to_b/..", "c/up/a", "c/up/to_b/../b", "c/./up",
               "loop", "a/../c"]  # fmt: skip
    paths = [str(root / d / n) for d in folders for n in names]
    return paths + [str(root / "to_b") + "/", str(root / "c" / "up") + "//a/./f.txt"]


@pytest.mark.parametrize("listed_from", [1, 10**9])  # each folder's listing read; none
def test_real_paths_is_realpath_of_each(tmp_path, monkeypatch, listed_from):
    """Which files are links: from their folders' listings, or an lstat each."""
    monkeypatch.setattr(_paths, "LISTED_FROM", listed_from)
    paths = _tree(tmp_path)
    monkeypatch.chdir(tmp_path / "a")  # the relative ones (made from the root) mean others here
    paths += [os.path.relpath(p, tmp_path) for p in paths[:90]]
    assert real_paths(paths) == [os.path.realpath(p) for p in paths]


def test_real_paths_follows_a_link_its_folder_lists_under_another_spelling(tmp_path):
    """A name spelt otherwise than its folder's listing spells it names the same file (here
    "\\udcc3\\udca9", undecodable bytes' escapes, is the bytes of "é"; on a file system
    that ignores case or normalises, "A" or an NFC name): where the listing says which
    files are links, such a link is still followed, as realpath follows it."""
    (tmp_path / "d").mkdir()
    (tmp_path / "target.txt").write_text("x")
    paths = [str(tmp_path / "d" / f"f{i}.txt") for i in range(_paths.LISTED_FROM)]
    for p in paths:
        Path(p).write_text("x")
    (tmp_path / "d" / "\u00e9").symlink_to(tmp_path / "target.txt")
    paths.append(str(tmp_path / "d" / "\udcc3\udca9"))  # os.fsencode: b"...d/\xc3\xa9"
    assert os.path.realpath(paths[-1]) == os.path.realpath(tmp_path / "target.txt")
    assert real_paths(paths) == [os.path.realpath(p) for p in paths]


def test_real_paths_reads_a_huge_folder_only_as_far_as_the_files_asked_for(tmp_path, monkeypatch):
    """64 files asked for in a folder of many more: its listing is read for a few entries
    per file asked for, not whole (a folder of a million files took 0.6 s, an lstat each
    0.6 ms); the files not among them, links or not, are each looked up on their own."""
    folder = tmp_path / "huge"
    folder.mkdir()
    for i in range(4000):
        (folder / f"{i:04d}").touch()
    (tmp_path / "target").touch()
    paths = []
    for i in range(0, 4000, 4000 // _paths.LISTED_FROM)[: _paths.LISTED_FROM]:
        if i % 3 == 0:  # a third of them links
            (folder / f"{i:04d}").unlink()
            (folder / f"{i:04d}").symlink_to(tmp_path / "target")
        paths.append(str(folder / f"{i:04d}"))
    read, scandir = [], os.scandir

    def counted(path):
        with scandir(path) as entries:
            for entry in entries:
                read.append(entry.name)
                yield entry

    monkeypatch.setattr(_paths.os, "scandir", lambda path: contextlib.closing(counted(path)))
    real = real_paths(paths)
    monkeypatch.undo()
    assert real == [os.path.realpath(p) for p in paths]
    assert 0 < len(read) <= 8 * len(paths)


def test_the_walk_gives_each_files_real_path(tmp_path, monkeypatch):
    """A `**` walk gives each file it lists with its real path (its folder's, resolved
    once, joined with its name; a link resolved on its own): what realpath gives."""
    from corpusprep.sources.files import _walk_glob

    _tree(tmp_path)
    (tmp_path / "a" / "b" / "deep").mkdir()
    (tmp_path / "a" / "b" / "deep" / "to_c.txt").symlink_to(tmp_path / "c" / "h.txt")
    monkeypatch.chdir(tmp_path / "a")
    for pattern in (f"{tmp_path}/**/*.txt", "../**/*.txt", "**/*", f"{tmp_path}/c/up/**/f.txt"):
        listed, _, _ = _walk_glob(pattern)
        assert len(listed) > 2
        assert [real for _, real in listed] == [os.path.realpath(p) for p, _ in listed]


def test_redacting_a_path_without_a_name_or_url_leaves_it_as_it_is():
    """The quick way out (no '=', no ':': no 'name=value' and no URL) gives what the whole
    search gives, on texts made of the characters that matter."""
    rng = random.Random(1)
    alphabet = "ab/=:._-token?&@ \n,}"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert redact_text(text) == redact_urls_and_pairs(text), text


def test_a_names_suffix_is_what_path_suffix_says():
    """Formats and compression are told by the name's suffix, split without a Path per
    file; the same as Path.suffix, '..jsonl' and '.bashrc' included."""
    from pathlib import PurePosixPath

    from corpusprep.compression import suffix

    rng = random.Random(3)
    for _ in range(20_000):
        name = rng.choice(["", "d.x/", "/p/..q/"]) + "".join(
            rng.choice("ab.Z") for _ in range(rng.randint(1, 9))
        )
        if name.rsplit("/", 1)[-1] in (".", ".."):  # not a file's name
            continue
        assert suffix(name) == PurePosixPath(name).suffix.lower(), name


_OPENED: list[str] = []  # paths opened while a test listens (audit hooks stay for good)


def _listen(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


def test_a_small_file_is_opened_twice_in_a_run_listed_then_read(tmp_path):
    """Once when listed (its magic bytes and size) and once when read (whole, and hashed
    by its reader): a corpus of 50,000 small files spent seconds opening each a third and
    a fourth time (the plan, the manifest's sha256). Every worker runs in this process."""
    import hashlib
    import json
    import sys
    from collections import Counter

    from helpers import compose

    from corpusprep.prepare import prepare

    corpus = tmp_path / "corpus"
    for i in range(40):
        (corpus / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (corpus / f"d{i % 4}" / f"f{i:03d}.txt").write_text(f"document {i}\n" * (i + 1))
    sys.addaudithook(_listen)
    _OPENED[:] = ["(listening)"]
    try:
        prepare(compose("source=files", f"source.glob={corpus}/**/*.txt", "tokenizer=byte",
                        f"out_dir={tmp_path / 'out'}", "executor.workers=1", "quiet=true",
                        "shard_bytes=1024"))  # fmt: skip
    finally:
        opened, _OPENED[:] = Counter(_OPENED[1:]), []
    inputs = sorted(str(p) for p in corpus.rglob("*.txt"))
    assert {p: opened[p] for p in inputs} == dict.fromkeys(inputs, 2)
    listed = json.loads((tmp_path / "out" / "manifest.json").read_text())["source"]["files"]
    assert {f["path"]: f["sha256"] for f in listed} == {
        p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in inputs
    }


def test_the_driver_asks_about_each_input_once_after_listing_it(tmp_path, monkeypatch):
    """The listing's look at a file (its open for the magic bytes; the walk, which knows
    its real path) is what the run keeps of it, and a small file's reader checks it did
    not change (an fstat once read): after the listing, the driver stats no input and
    lstats none. 50,311 files took 0.23 s more for a second stat each, 0.19 s for the
    manifest's real paths and 0.2 s for a third stat after encoding. A link among them
    is listed under its real path. Every worker runs in this process."""
    import json
    from collections import Counter

    from helpers import compose

    from corpusprep.prepare import prepare
    from corpusprep.sources.files import FilesSource

    corpus = tmp_path / "corpus"
    for i in range(40):
        (corpus / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (corpus / f"d{i % 4}" / f"f{i:03d}.txt").write_text(f"document {i}\n" * (i + 1))
    (tmp_path / "elsewhere.txt").write_text("linked in\n")
    (corpus / "d0" / "link.txt").symlink_to(tmp_path / "elsewhere.txt")
    inputs = {str(p) for p in corpus.rglob("*.txt")}
    asked: Counter = Counter()
    listing = FilesSource.files

    def files(self, progress=True):
        listed = listing(self, progress)
        for name, call in (("stat", os.stat), ("lstat", os.lstat)):

            def counted(path, *args, _call=call, _name=name, **kwargs):
                if isinstance(path, str) and path in inputs:
                    asked[_name, path] += 1
                return _call(path, *args, **kwargs)

            monkeypatch.setattr(os, name, counted)
        return listed

    monkeypatch.setattr(FilesSource, "files", files)
    prepare(compose("source=files", f"source.glob={corpus}/**/*.txt", "tokenizer=byte",
                    f"out_dir={tmp_path / 'out'}", "executor.workers=1", "quiet=true",
                    "shard_bytes=1024"))  # fmt: skip
    assert dict(asked) == {}
    listed = json.loads((tmp_path / "out" / "manifest.json").read_text())["source"]["files"]
    assert sorted(f["path"] for f in listed) == sorted(os.path.realpath(p) for p in inputs)


def test_a_small_file_written_while_its_reader_reads_it_is_an_error(tmp_path, monkeypatch):
    """A small file is read whole by its shard's reader, which then checks it is the file
    the listing found (inode, size, mtime, ctime): one written meanwhile, even to the same
    size, is one line, and no output is made. Every worker runs in this process."""
    import pytest

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to tell which file a descriptor reads")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"f{i}.txt").write_text(f"document {i}\n" * 10)
    real = os.read

    def read(fd, n):
        data = real(fd, n)
        if n > 8 and os.readlink(f"/proc/self/fd/{fd}").endswith("f2.txt"):  # (not the peek)
            with open(corpus / "f2.txt", "r+b") as f:  # written to the same size meanwhile
                f.write(b"D")
        return data

    monkeypatch.setattr(os, "read", read)
    _fails_as_changed(corpus, tmp_path / "out")


def test_a_reader_on_a_mount_that_numbers_inodes_otherwise_is_not_a_change(tmp_path, monkeypatch):
    """A worker on another node (Ray, Slurm) sees the shared folder through its own mount:
    one that numbers inodes itself (sshfs, gcsfuse, an S3 mount: their inode numbers are
    the mount's, not the file's) gives a small file's reader another st_ino than the
    driver's listing found, for a file no one wrote. The run still finishes, with the
    bytes read; a file written since the listing still ends it (the driver's own stat
    says so). Every worker runs in this process: its view is made up."""
    import hashlib
    import json

    import pytest
    from helpers import compose

    from corpusprep.errors import UserError
    from corpusprep.formats import text as text_format
    from corpusprep.prepare import prepare

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"f{i}.txt").write_text(f"document {i}\n" * 10)
    read_small = text_format.read_small

    class Elsewhere:  # the stat another mount gives: the same file, another inode number
        def __init__(self, stat):
            self.stat = stat

        def __getattr__(self, name):
            return self.stat.st_ino + 7 if name == "st_ino" else getattr(self.stat, name)

    written = []

    def elsewhere(path, size):
        if path.endswith("f2.txt") and written:  # written since the listing
            with open(path, "r+b") as f:
                f.write(b"D")
        data, stat = read_small(path, size)
        return data, Elsewhere(stat)

    monkeypatch.setattr(text_format, "read_small", elsewhere)
    cfg = compose("source=files", f"source.glob={corpus}/*.txt", "tokenizer=byte",
                  f"out_dir={tmp_path / 'out'}", "executor.workers=1", "quiet=true")  # fmt: skip
    prepare(cfg)
    listed = json.loads((tmp_path / "out" / "manifest.json").read_text())["source"]["files"]
    assert {os.path.basename(f["path"]): f["sha256"] for f in listed} == {
        f"f{i}.txt": hashlib.sha256((corpus / f"f{i}.txt").read_bytes()).hexdigest()
        for i in range(4)
    }
    written.append(True)
    with pytest.raises(UserError, match="f2.txt: the file changed while it was being read"):
        prepare(compose("source=files", f"source.glob={corpus}/*.txt", "tokenizer=byte",
                        f"out_dir={tmp_path / 'again'}", "executor.workers=1", "quiet=true",
                        "force=true"))  # fmt: skip


def test_a_plugins_source_without_sources_init_still_runs(tmp_path):
    """A plugin's source that implements files() and describe() but has an __init__ of its
    own (not calling Source's) runs as before the listing's stats were kept: the run asks
    it for nothing else."""
    from helpers import compose

    from corpusprep.prepare import prepare

    (tmp_path / "in.txt").write_text("a plugin's text\n" * 200)
    manifest = prepare(compose("source=file", "source._target_=fault_tokenizers.OwnInitSource",
                               f"source.path={tmp_path / 'in.txt'}", "tokenizer=byte",
                               f"out_dir={tmp_path / 'out'}", "quiet=true"))  # fmt: skip
    assert [f["path"] for f in manifest["source"]["files"]] == [str(tmp_path / "in.txt")]


def _small_files(root: Path, count: int = 240) -> None:
    for i in range(count):
        folder = root / f"d{i % 6}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:04d}.txt").write_text(f"file {i}: " + "words and more words " * (i % 9))


def test_a_run_of_small_files_killed_midway_resumes_from_its_finished_shards(
    tmp_path, tiktoken_cache
):
    """The small files read whole are hashed by their readers, and each finished shard's
    marker keeps their digests: a resume reuses the shards whose files still have them,
    the rest (files not hashed by the driver) recorded before the first shard starts. A
    marker that names other bytes for a file it read (or none) is redone. The outputs and
    the manifest are a fresh run's."""
    import json

    from helpers import FAULTS, crash_after_documents, run_cli

    _small_files(tmp_path / "corpus")
    args = ["source=files", "source.glob=corpus/**/*.txt", "tokenizer=tiktoken",
            "shard_bytes=1500", "executor.workers=1", "quiet=true"]  # fmt: skip
    ref = run_cli(*args, "out_dir=ref", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    args = crash_after_documents(args, tmp_path, documents=150)
    markers = sorted((tmp_path / "out").rglob("*.done"))
    assert len(markers) > 4
    tampered = json.loads(markers[0].read_text())
    name = next(iter(tampered["sha256"]))
    tampered["sha256"][name] = "0" * 64
    markers[0].write_text(json.dumps(tampered))
    again = run_cli(*args, "out_dir=out", cwd=tmp_path, env=FAULTS)
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(markers) - 1} of " in again.stderr
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()
    made, want = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("out", "ref"))
    assert made["source"] == want["source"] and made["documents"] == want["documents"]


def test_the_manifest_lists_an_input_file_a_line_and_reads_back_as_written():
    """json.dump(indent=2) is pure Python: a manifest listing 50,000 inputs took a second
    to write. It is written as indent=2 writes it, but for a list of objects (the inputs),
    an object a line, by json's C encoder; it reads back the same."""
    import json

    from corpusprep.writer import manifest_text

    listed = [{"path": f"/c/\u00e9{i}.txt", "bytes": i} for i in range(3)]
    manifest = {"corpusprep": "0.2.2", "name": None, "ok": True, "ratio": 2.1142,
                "source": {"kind": "files", "glob": ["a/**/*.txt"], "files": listed},
                "empty": {}, "nested": [[1, 2], {"a": [1]}], "out": {"train.bin": 10},
                "keys": {3: "a", None: "b", True: "c", 2.5: "d"}}  # fmt: skip
    text = manifest_text(manifest)
    assert json.loads(text) == json.loads(json.dumps(manifest))
    assert '    "files": [\n      {"path": "/c/\u00e90.txt", "bytes": 0},\n      {"path"' in text
    without = {k: v for k, v in manifest.items() if k != "source"}
    assert manifest_text(without) == json.dumps(without, indent=2, ensure_ascii=False)


def test_a_marker_that_is_json_but_not_an_object_is_not_a_finished_shard(tmp_path):
    """A work folder may come from anyone, and a marker may be cut or planted: one that
    parses to null, a list, a string or a number is a shard to redo, not a traceback (its
    digests of the small files were looked up with record.get)."""
    import hashlib

    from corpusprep.formats import InputFile, Segment
    from corpusprep.shards import EncodeTask, Rules, Shard, Target, encode_shard, finished
    from corpusprep.tokenizers.byte import ByteTokenizer

    path = tmp_path / "a.txt"
    path.write_text("a small file " * 20)
    file = InputFile(str(path), "text", size=path.stat().st_size)
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "000000.done"
    task = EncodeTask(Shard(0, (Segment(file, 0, file.size, file.size),)),
                      Rules(ByteTokenizer(), "uint16", "stream", eot="append", eot_id=256),
                      train=Target(str(work / "train.000000.part"), fresh=True),
                      train_index=str(work / "train.000000.docs"), marker=str(marker))  # fmt: skip
    encode_shard(task)
    hashes = {file.name: hashlib.sha256(path.read_bytes()).digest()}
    assert finished(task, 2, hashes) is not None
    for planted in ("null", "[]", '"sha256"', "7", "[1, 2]"):
        marker.write_text(planted)
        assert finished(task, 2, hashes) is None, planted


def test_a_file_grown_between_its_listing_and_the_runs_first_look_is_an_error(
    tmp_path, monkeypatch
):
    """A small file is read up to the size it was listed with, and its reader's sha256 of
    those bytes is the manifest's: a file that grew after it was listed (a log still being
    written) but before the run took every file's stat gave a manifest whose sha256 was
    not the file's, and output without its last bytes. It is one line, as a change later."""

    from corpusprep.sources.files import FilesSource

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"f{i}.txt").write_text(f"document {i}\n" * 10)
    listing = FilesSource.files

    def files(self, progress=True):
        listed = listing(self, progress)
        with open(corpus / "f2.txt", "a") as f:
            f.write("grown after it was listed\n")
        return listed

    monkeypatch.setattr(FilesSource, "files", files)
    _fails_as_changed(corpus, tmp_path / "out")


def test_dotdot_after_a_link_in_a_pattern_lists_what_it_listed_before(tmp_path, monkeypatch):
    """A path is made absolute by dropping "name/.." (os.path.abspath), which after a link
    to a folder names another file than the one the walk found there: the file read is the
    absolute path's, so two files are one only if that path's real path says so. The
    walk's own real path (its folder's, resolved through the link) made x/top.txt the same
    file as z/top.txt, and it was left out without a word."""
    from corpusprep.sources.files import FilesSource

    for folder in ("x", "z/w"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "x" / "top.txt").write_text("x's own\n")
    (tmp_path / "z" / "top.txt").write_text("z's own\n")
    (tmp_path / "x" / "lnk").symlink_to(tmp_path / "z" / "w")  # x/lnk/.. is z, for the OS
    monkeypatch.chdir(tmp_path)
    listed = FilesSource(glob=["x/lnk/../**/top*.txt", "z/top.txt"]).paths()
    assert listed == [str(tmp_path / "x" / "top.txt"), str(tmp_path / "z" / "top.txt")]


def _fails_as_changed(corpus: Path, out: Path) -> None:
    """The run over corpus/*.txt fails as f2.txt changed while read, and makes no outputs."""
    from helpers import compose

    from corpusprep.errors import UserError
    from corpusprep.prepare import prepare

    cfg = compose("source=files", f"source.glob={corpus}/*.txt", "tokenizer=byte",
                  f"out_dir={out}", "executor.workers=1", "quiet=true")  # fmt: skip
    with pytest.raises(UserError, match="f2.txt: the file changed while it was being read"):
        prepare(cfg)
    assert not (out / "manifest.json").exists()

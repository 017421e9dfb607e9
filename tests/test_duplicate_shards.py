"""A shard run twice at once: Ray may run a task again while its first run goes on (a node
it took for dead), and a Slurm array goes on after its driver was killed, beside the re-run's
own array. Whatever a shard's duplicate does, a reader sees the finished shard's files."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from corpusprep.formats import InputFile, Segment
from corpusprep.shards import EncodeTask, Rules, Shard, Target, encode_shard, finished
from corpusprep.tokenizers.byte import ByteTokenizer


class _Held(ByteTokenizer):
    """Encodes as the byte tokenizer, once `go` is set."""

    def __init__(self, go: threading.Event, **kwargs) -> None:
        super().__init__(**kwargs)
        self.go, self.started = go, threading.Event()

    def encode_documents(self, texts):
        self.started.set()
        self.go.wait(30)
        return super().encode_documents(texts)


def test_a_shard_run_again_meanwhile_never_shows_a_reader_less_than_it_wrote(tmp_path: Path):
    files = []
    for k in range(3):
        path = tmp_path / f"{k}.txt"
        path.write_text(f"small file {k} " * 50)
        files.append(InputFile(str(path), "text", size=path.stat().st_size))
    shard = Shard(0, tuple(Segment(f, 0, f.size, f.size) for f in files))
    work = tmp_path / "work"
    work.mkdir()

    def task(tokenizer):
        rules = Rules(tokenizer, "uint16", "stream", eot="append", eot_id=256)
        return EncodeTask(shard, rules, train=Target(str(work / "train.000000.part"), fresh=True),
                          train_index=str(work / "train.000000.docs"),
                          marker=str(work / "000000.done"))  # fmt: skip

    first = encode_shard(task(ByteTokenizer()))
    hashes = {f.name: hashlib.sha256(Path(f.path).read_bytes()).digest() for f in files}
    written = {p.name: p.read_bytes() for p in work.iterdir()}
    go = threading.Event()
    held = _Held(go)
    again = threading.Thread(target=encode_shard, args=(task(held),))
    again.start()
    try:
        assert held.started.wait(30)
        for _ in range(20):  # while the duplicate runs: what the first wrote, whole
            assert finished(task(ByteTokenizer()), 2, hashes) is not None
            for name, data in written.items():
                assert (work / name).read_bytes() == data, name
    finally:
        go.set()
        again.join()
    assert {p.name: p.read_bytes() for p in work.iterdir()} == written
    assert first.train_tokens == len(written["train.000000.part"]) // 2


def test_a_fifo_planted_as_a_marker_or_its_keys_is_a_shard_to_redo(tmp_path: Path):
    """A work folder may be a stranger's: a FIFO where a finished shard's marker (or its
    keys) should be made a resume wait for ever for a writer. It is a shard to redo."""
    import os

    path = tmp_path / "a.txt"
    path.write_text("a small file " * 50)
    file = InputFile(str(path), "text", size=path.stat().st_size)
    shard = Shard(0, (Segment(file, 0, file.size, file.size),))
    work = tmp_path / "work"
    work.mkdir()
    rules = Rules(ByteTokenizer(), "uint16", "stream", eot="append", eot_id=256)
    task = EncodeTask(shard, rules, train=Target(str(work / "train.000000.part"), fresh=True),
                      train_index=str(work / "train.000000.docs"),
                      marker=str(work / "000000.done"))  # fmt: skip
    encode_shard(task)
    hashes = {file.name: hashlib.sha256(path.read_bytes()).digest()}
    assert finished(task, 2, hashes) is not None
    marker = Path(task.marker).read_bytes()
    Path(task.marker).write_text("[" * 5000)  # nested past Python's recursion limit
    assert finished(task, 2, hashes) is None
    Path(task.marker).write_bytes(marker)
    assert finished(task, 2, hashes) is not None
    for planted in (task.marker, f"{task.marker}.keys"):
        kept = Path(planted).read_bytes()
        os.unlink(planted)
        os.mkfifo(planted)
        answer: list = []

        def read(said: list = answer) -> None:
            said.append(finished(task, 2, hashes))

        reading = threading.Thread(target=read, daemon=True)
        reading.start()
        reading.join(10)
        assert answer == [None], planted
        os.unlink(planted)
        Path(planted).write_bytes(kept)
        assert finished(task, 2, hashes) is not None

"""Shards are packed by the work in them (issue 13): a compressed file counts as the text it
holds (zstd's frame content size, gzip's ISIZE, a zip member's size; else a guess), not
its size on disk, so a handful of compressed files gives a shard each, not one shard for
several of them that leaves the other workers idle. The output never depends on it."""

from __future__ import annotations

import gzip
import json
import lzma
import zipfile
from pathlib import Path

import zstandard
from helpers import run_cli

from corpusprep.compression import GUESSED_RATIO, text_size

TEXT = b"".join(b"line %d of some text to compress\n" % i for i in range(20_000))


def test_the_text_size_of_a_compressed_file(tmp_path: Path):
    files = {"a.gz": gzip.compress(TEXT), "a.zst": zstandard.compress(TEXT),
             "a.xz": lzma.compress(TEXT)}  # fmt: skip
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with zipfile.ZipFile(tmp_path / "a.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("small.txt", TEXT[:1000])
        archive.writestr("big.txt", TEXT)
    size = {name: (tmp_path / name).stat().st_size for name in [*files, "a.zip"]}
    assert text_size(tmp_path / "a.gz", "gzip", None, size["a.gz"]) == len(TEXT)
    assert text_size(tmp_path / "a.zst", "zstd", None, size["a.zst"]) == len(TEXT)
    assert text_size(tmp_path / "a.xz", "xz", None, size["a.xz"]) == size["a.xz"] * GUESSED_RATIO
    assert text_size(tmp_path / "a.zip", "zip", "small.txt", size["a.zip"]) == 1000
    assert text_size(tmp_path / "a.zip", "zip", "big.txt", size["a.zip"]) == len(TEXT)
    # a cut or foreign file: a guess, never an error here (reading it reports the damage)
    (tmp_path / "cut.zst").write_bytes(b"\x28\xb5")
    assert text_size(tmp_path / "cut.zst", "zstd", None, 2) == 2 * GUESSED_RATIO
    stream = zstandard.ZstdCompressor().compressobj()  # streamed: no content size recorded
    (tmp_path / "s.zst").write_bytes(stream.compress(TEXT) + stream.flush())
    size = (tmp_path / "s.zst").stat().st_size
    assert text_size(tmp_path / "s.zst", "zstd", None, size) == size * GUESSED_RATIO


def test_compressed_files_get_a_shard_each_and_the_same_files(tmp_path: Path):
    rows = [json.dumps({"text": f"document {i}: " + "words of text " * (i % 40)}) for i in
            range(8000)]  # fmt: skip
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    for k in range(4):
        data = ("\n".join(rows[k::4]) + "\n").encode()
        assert len(data) > 200_000 and len(zstandard.compress(data)) < 50_000
        (plain / f"part{k}.jsonl").write_bytes(data)
        (packed / f"part{k}.jsonl.zst").write_bytes(zstandard.compress(data))
    made = {}
    for name, glob, shard_bytes in (("plain", "plain/*.jsonl", 10**8),
                                    ("packed", "packed/*.jsonl.zst", 200_000)):  # fmt: skip
        r = run_cli("source=files", f"source.glob={glob}", f"shard_bytes={shard_bytes}",
                    "executor.workers=2", f"out_dir=out_{name}", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        made[name] = json.loads((tmp_path / f"out_{name}" / "manifest.json").read_text())
    assert made["packed"]["shards"]["count"] == 4  # by size on disk, all four were one shard
    assert made["plain"]["shards"]["count"] == 1
    for name in ("train.bin", "val.bin", "meta.pkl"):
        assert (tmp_path / "out_plain" / name).read_bytes() == (
            tmp_path / "out_packed" / name
        ).read_bytes()

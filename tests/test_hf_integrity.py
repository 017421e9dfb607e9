"""source=hf never reads a file other than the one the Hub names (an attack found these):
huggingface_hub names each blob of its cache by the Hub's ETag (an LFS file's sha256, else
git's blob sha1) but checks only the size, so a CDN serving other bytes, a download cut
short, or a cached copy damaged since were read as the dataset. Each download is checked
against its name: a bad one is downloaded again once, and never kept."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
import test_hf_source as hf
from helpers import assert_one_line_error
from test_hf_source import corpus, hf_cli, jsonl, parquet, texts

from corpusprep.sources.hf import _not_as_named

pytest.importorskip("huggingface_hub", reason="source=hf needs pip install '.[hub]'")
_clean_env, hub = hf._clean_env, hf.hub  # the stand-in Hub and its CDN, the HF cache in tmp


def _blobs(tmp_path):
    return sorted((tmp_path / "hf_home").rglob("blobs/*"))


def _as_named(tmp_path) -> None:
    """Every blob the HF cache keeps has the bytes its name says."""
    for blob in _blobs(tmp_path):
        assert _not_as_named(blob) is None, blob


def test_an_lfs_file_with_other_bytes_than_its_sha256_is_refused_and_not_kept(hub, tmp_path):
    good, bad = parquet(texts("good", 20)), parquet(texts("evil", 20))
    assert len(good) == len(bad)  # the only check huggingface_hub makes passes
    hub.push("t/lfs", {"data/train-00000-of-00001.parquet": good})
    hub.cdn.blobs[hashlib.sha256(good).hexdigest()] = bad
    result = hf_cli(tmp_path, hub, "t/lfs", "out_dir=out")
    note, error = result.stderr.strip().splitlines()  # the first try, then the error
    assert "downloading it again" in note
    said = SimpleNamespace(returncode=result.returncode, stdout=result.stdout, stderr=error)
    assert_one_line_error(said, "train-00000-of-00001.parquet", "sha256", "nothing was kept")
    assert not (tmp_path / "out").exists()
    _as_named(tmp_path)
    assert not [b for b in _blobs(tmp_path) if b.stat().st_size == len(bad)]


def _damage(tmp_path, size: int, how: str) -> None:
    [blob] = [b for b in _blobs(tmp_path) if b.stat().st_size == size]
    data = blob.read_bytes()
    if how == "cut":  # at a line end: every line left is whole
        blob.write_bytes(data[: data.index(b"\n", size // 2) + 1])
    else:  # the same size, one byte other
        blob.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])


@pytest.mark.parametrize("how", ["cut", "changed"])
@pytest.mark.parametrize("lfs", [False, True])
def test_a_damaged_cached_file_is_downloaded_again(lfs, how, hub, tmp_path):
    name, body = ("data/train-00000-of-00001.parquet", parquet(texts("x", 50))) if lfs else (
        "data/train.jsonl", jsonl(texts("x", 50)))  # fmt: skip
    hub.push("t/cut", {name: body})
    first = hf_cli(tmp_path, hub, "t/cut", "out_dir=first")
    assert first.returncode == 0, first.stderr
    _damage(tmp_path, len(body), how)
    second = hf_cli(tmp_path, hub, "t/cut", "out_dir=second")
    assert second.returncode == 0, second.stderr
    assert "downloading it again" in second.stderr
    assert corpus(tmp_path / "second") == corpus(tmp_path / "first")
    _as_named(tmp_path)


def test_a_damaged_cached_file_offline_is_one_line_and_removed(hub, tmp_path):
    body = jsonl(texts("x", 50))
    hub.push("t/cut", {"data/train.jsonl": body})
    first = hf_cli(tmp_path, hub, "t/cut", "out_dir=first")
    assert first.returncode == 0, first.stderr
    _damage(tmp_path, len(body), "cut")
    offline = hf_cli(tmp_path, hub, "t/cut", "out_dir=second", env={"HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 1
    assert "downloading it again" in offline.stderr
    error = offline.stderr.strip().splitlines()[-1]
    assert error.startswith("corpusprep: error: ") and "run once with network" in error
    assert not (tmp_path / "second").exists()
    _as_named(tmp_path)  # the damaged copy is gone: a run with network fetches it afresh
    again = hf_cli(tmp_path, hub, "t/cut", "out_dir=third")
    assert again.returncode == 0, again.stderr
    assert corpus(tmp_path / "third") == corpus(tmp_path / "first")


@pytest.mark.parametrize(
    "name", ["../../../../escape/evil.jsonl", "data/../../../escape/evil.jsonl"]
)
def test_a_data_file_outside_the_repository_is_refused_by_name(name, hub, tmp_path):
    """A Hub (or mirror) listing a file outside the repository: one line that says so
    (before: 'ValueError from http://...'), and nothing written outside the HF cache."""
    card = hf.card(f"configs:\n- config_name: default\n  data_files: '{name}'")
    hub.push("t/out", {"README.md": card, name: jsonl(texts("evil", 3))})
    result = hf_cli(tmp_path, hub, "t/out", "out_dir=out")
    assert_one_line_error(result, repr(name), "a path outside the repository")
    assert not [p for p in tmp_path.rglob("evil.jsonl")]


def test_a_damaged_file_a_read_only_cache_keeps_is_one_line(tmp_path, monkeypatch):
    """A shared or read-only HF cache: the damaged file cannot be taken out (before: a
    PermissionError traceback)."""
    from pathlib import Path

    from corpusprep.errors import UserError
    from corpusprep.sources import hf as hf_source

    blob = tmp_path / "blobs" / hashlib.sha256(b"good").hexdigest()
    blob.parent.mkdir()
    blob.write_bytes(b"bad")
    assert "sha256" in _not_as_named(blob)

    def refuse(self, missing_ok=False):
        raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(UserError, match="cannot be removed .Operation not permitted.; remove"):
        hf_source._forget(blob)

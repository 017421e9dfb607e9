"""`python -m corpusprep.inspect DIR --plot FILE.png`: the file is a real PNG of a sensible
size, and the numbers behind it (returned by the plot functions) are checked against
values computed here from the nanoGPT files of the same run."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, compose, run_cli

import corpusprep
from corpusprep.errors import UserError
from corpusprep.prepare import prepare

pytest.importorskip("matplotlib")

from corpusprep import plot  # noqa: E402

EOT = 50256  # gpt2's <|endoftext|>


def png(path: Path) -> tuple[int, int, int]:
    """(bytes, width, height) of a PNG file, from its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    assert data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82", "no IEND chunk: truncated"
    return len(data), width, height


def inspect_cli(*args, cwd):
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "corpusprep.inspect", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), **env})  # fmt: skip


def run(out: Path, *overrides: str) -> Path:
    prepare(compose(f"out_dir={out}", "quiet=true", *overrides))
    return out


def ids_of(out: Path, side: str) -> np.ndarray:
    m = json.loads((out / "manifest.json").read_text())
    return np.fromfile(out / f"{side}.bin", dtype=m["dtype"])


@pytest.fixture
def docs_corpus(tmp_path, shakespeare) -> Path:
    """tiny shakespeare as 40 files of whole paragraphs (documents of varied lengths)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    paragraphs = shakespeare.read_text().split("\n\n")
    cuts = np.linspace(0, len(paragraphs), 41).astype(int)
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        end = a + (b - a) * (i % 3 + 1) // 3  # a third, two thirds or all: varied lengths
        (folder / f"p{i:02d}.txt").write_text("\n\n".join(paragraphs[a:end]))
    return folder


def test_one_text_figure_and_its_numbers(tmp_path, shakespeare, tiktoken_cache):
    src = [f"source.path={shakespeare}", "source=file", "tokenizer=tiktoken"]
    ref = run(tmp_path / "ref", *src)
    out = run(tmp_path / "llmc", *src, "format=llmc", "shard_tokens=100000")
    data = plot.plot_run(corpusprep.load(out), tmp_path / "fig.png")
    size, width, height = png(tmp_path / "fig.png")
    # 15 x 4.6 in at 100 dpi: 4.6 * 100 is 459.99999999999994, which matplotlib 3.9.4 (the
    # newest on Python 3.9) truncates to 459 pixels and 3.11 rounds to 460
    assert size > 10_000 and width == 1500 and height in (459, 460)

    ids = np.concatenate([ids_of(ref, "train"), ids_of(ref, "val")])
    counts = np.bincount(ids, minlength=50257)
    freq = data["frequency"]
    assert np.array_equal(freq["frequencies"], np.sort(counts[counts > 0])[::-1])
    assert list(freq["ranks"][:3]) == [1, 2, 3] and len(freq["ranks"]) == freq["ids_used"]
    assert freq["ids_used"] == int((counts > 0).sum()) and freq["vocab_size"] == 50257
    assert freq["frequencies"].sum() == len(ids) == 301_966 + 36_059

    assert data["documents"] == {"one_text": True, "tokens": {"train": 301_966, "val": 36_059}}
    m = json.loads((ref / "manifest.json").read_text())
    cpt = data["chars_per_token"]
    for side in ("train", "val"):
        assert cpt["values"][side] == m["split"][f"{side}_chars"] / m["tokens"][side]
        assert cpt["method"][side] == "exact (manifest)"
    assert cpt["values"]["train"] == pytest.approx(1_003_854 / 301_966)  # nanoGPT's cut
    assert cpt["overall"] == m["chars_per_token"]


def test_documents_figure_and_its_numbers(tmp_path, docs_corpus, tiktoken_cache):
    src = ["source=files", f"source.glob={docs_corpus}/*.txt", "tokenizer=tiktoken"]
    ref = run(tmp_path / "ref", *src)
    out = run(tmp_path / "meg", *src, "format=megatron")
    ds = corpusprep.load(out)
    data = plot.plot_run(ds, tmp_path / "fig.png")
    size, width, height = png(tmp_path / "fig.png")
    assert size > 10_000 and width == 1500

    m = ds.manifest
    hist = data["documents"]
    assert hist["one_text"] is False
    edges = hist["edges"]
    assert edges.dtype.kind == "i" and (np.diff(edges) > 0).all()
    for side in ("train", "val"):
        ids = ids_of(ref, side)
        starts = np.fromfile(ref / "doc_index" / f"{side}.docs.bin", np.uint64).astype(np.int64)
        lengths = np.diff(np.append(starts, len(ids)))
        assert edges[0] <= lengths.min() and lengths.max() < edges[-1]
        assert np.array_equal(hist["counts"][side], np.histogram(lengths, edges)[0])
        assert hist["documents"][side] == len(lengths) == m["documents"][side]
        assert hist["counts"][side].sum() + hist["empty"][side] == len(lengths)
        assert hist["tokens"][side] == len(ids) and hist["mean"][side] == lengths.mean()
        # chars per token: the whole split decoded, end-of-text tokens adding no characters
        text = ds.tokenizer.decode(ids[ids != EOT])
        assert data["chars_per_token"]["values"][side] == len(text) / len(ids)
        assert data["chars_per_token"]["method"][side] == "exact (decoded)"
    values, tokens = data["chars_per_token"]["values"], m["tokens"]
    both = (values["train"] * tokens["train"] + values["val"] * tokens["val"]) / sum(
        tokens.values()
    )
    assert both == pytest.approx(m["chars_per_token"], abs=1e-4)  # agrees with the manifest

    # a large split is estimated from windows spread over it, close to the exact value
    estimate = plot.chars_per_token(ds, sample=32_768)
    assert estimate["method"]["train"] == "estimated (32,768 tokens)"
    assert estimate["values"]["train"] == pytest.approx(values["train"], rel=0.05)


def test_inspect_plot_from_the_command_line(tmp_path, shakespeare):
    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}", "format=npy")
    r = inspect_cli(out, "--plot", tmp_path / "c.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "format       npy" in r.stdout
    size, width, height = png(tmp_path / "c.png")
    assert size > 10_000 and width == 1500 and height in (459, 460)  # as above
    assert not list(tmp_path.glob(".c.png*"))  # the temporary name is gone
    r = inspect_cli(out, "--plot", tmp_path / "no" / "such" / "c.png", cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "cannot write the figure" in r.stderr and "Traceback" not in r.stderr


def test_without_matplotlib_it_is_one_line(tmp_path, shakespeare, monkeypatch, capsys):
    from corpusprep import inspect

    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(SystemExit) as e:
        inspect.main([str(out), "--plot", str(tmp_path / "x.png")])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "corpusprep.inspect: error: --plot needs matplotlib: "
        "pip install 'corpusprep[plot]' (or matplotlib)"
    )
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(UserError, match="needs matplotlib"):  # the Python API says so too
        plot.plot_run(corpusprep.load(out), tmp_path / "x.png")


def test_sweep_comparison(tmp_path, shakespeare):
    (tmp_path / "a.txt").write_text(shakespeare.read_text()[:200_000])
    r = run_cli("-m", "source=file", "source.path=a.txt", "tokenizer=char,byte",
                "format=nanogpt,npy", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (sweep,) = [p for p in (tmp_path / "multirun").glob("*/*") if p.is_dir()]
    assert (sweep / "summary.csv").is_file()
    # a failed job, as a launcher records it: a row with no numbers
    failed = sweep / "split=1.5"
    failed.mkdir()
    overrides = ["source=file", "source.path=a.txt", "tokenizer=char", "split=1.5"]
    record = {"job": 4, "overrides": overrides, "status": "failed", "reason": "split=1.5: ..."}
    (failed / "corpusprep_job.json").write_text(json.dumps(record))
    listed = json.loads((sweep / "corpusprep_sweep.json").read_text())  # the sweep's jobs:
    listed["jobs"].append(overrides)  # its 5th (a record of no job of the sweep is not shown)
    (sweep / "corpusprep_sweep.json").write_text(json.dumps(listed))

    r = inspect_cli(sweep, "--plot", tmp_path / "cmp.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "5 jobs" in r.stdout and "failed" in r.stdout and "wrote" in r.stdout
    size, width, height = png(tmp_path / "cmp.png")
    assert size > 10_000 and width == 1500 and height > 300

    data = plot.plot_sweep(sweep, tmp_path / "cmp2.png")
    assert data["jobs"] == [0, 1, 2, 3, 4]
    assert data["status"] == ["ok", "ok", "ok", "ok", "failed"]
    # labelled by what differs between the jobs
    assert data["labels"] == ["tokenizer=char,format=nanogpt", "tokenizer=char,format=npy",
                              "tokenizer=byte,format=nanogpt", "tokenizer=byte,format=npy",
                              "tokenizer=char,split=1.5"]  # fmt: skip
    assert data["train_tokens"][4] is None and data["vocab_use"][4] is None
    text = (tmp_path / "a.txt").read_text()
    records = [json.loads(p.read_text()) for p in sweep.glob("*/corpusprep_job.json")]
    records = {r["job"]: r for r in records}
    for i, label in enumerate(data["labels"][:4]):
        record = records[i]
        assert data["overrides"][i] == record["overrides"]
        m = json.loads((Path(record["out_dir"]) / "manifest.json").read_text())
        assert data["train_tokens"][i] == m["tokens"]["train"]
        assert data["val_tokens"][i] == m["tokens"]["val"]
        assert data["chars_per_token"][i] == m["chars_per_token"]
        # vocabulary use: distinct ids over train + val, out of the vocabulary
        ds = corpusprep.load(record["out_dir"])
        used = len(np.unique(np.concatenate([np.asarray(ds.train), np.asarray(ds.val)])))
        assert data["ids_used"][i] == used and data["vocab_size"][i] == m["vocab_size"]
        assert data["vocab_use"][i] == used / m["vocab_size"]
        if "tokenizer=char" in label:
            assert data["vocab_use"][i] == 1.0  # char: the vocabulary is what occurs
        else:
            assert used == len(set(text.encode())) and m["vocab_size"] == 256


# found by an attack: a read-only folder for the figure was a traceback (removing the
# temporary file that could not be made failed too)
def test_a_figure_for_a_read_only_folder_is_one_line(tmp_path, shakespeare, tmpfs):
    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}")
    tmpfs("size=1m")
    folder = tmpfs("ro")
    r = inspect_cli(out, "--plot", folder / "c.png", cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot write the figure (Read-only file system)" in r.stderr


@pytest.mark.parametrize("name", ["train.bin", "manifest.json"])
def test_a_figure_is_never_written_over_a_file_that_is_not_one(tmp_path, shakespeare, name):
    """Found by an attack: `--plot out/train.bin` (a slip of tab completion) wrote the
    figure over the very folder it read, and the folder no longer loaded. A file there
    that is not a PNG (nor empty) is one line, untouched; an earlier figure is replaced."""
    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}")
    before = (out / name).read_bytes()
    r = inspect_cli(out, "--plot", out / name, cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("corpusprep.inspect: error: ") and name in r.stderr
    assert (out / name).read_bytes() == before
    corpusprep.load(out)
    for _ in range(2):  # a figure, then the same figure again over it
        r = inspect_cli(out, "--plot", out / "c.png", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    png(out / "c.png")


@pytest.mark.parametrize("name", ["fig.svg", "fig.pdf", "fig.JPG"])
def test_a_figure_named_for_another_format_is_one_line(tmp_path, shakespeare, name):
    """Found by the newcomer attack: `--plot fig.svg` (or .pdf, .jpg) wrote PNG bytes under
    that name and said `wrote fig.svg`: a file no SVG or PDF viewer opens. The figure is a
    PNG, so another format's name is one line, before any work, and nothing is written."""
    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}")
    r = inspect_cli(out, "--plot", name, cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("corpusprep.inspect: error: ") and name in r.stderr
    assert "PNG" in r.stderr and "fig.png" in r.stderr and not r.stdout
    assert not (tmp_path / name).exists()
    with pytest.raises(UserError, match="PNG"):  # the Python API says so too
        plot.plot_run(corpusprep.load(out), tmp_path / name)
    r = inspect_cli(out, "--plot", "fig.png", cwd=tmp_path)  # the name the line suggests
    assert r.returncode == 0, r.stderr
    png(tmp_path / "fig.png")


@pytest.mark.parametrize("where", ["nodir/fig.png", "a_file/fig.png"])
def test_a_figure_in_a_folder_that_is_not_there_is_one_line_before_any_work(
    tmp_path, shakespeare, where
):
    """Found by the newcomer attack: `--plot nodir/fig.png` printed the whole summary, then
    failed to write the figure. Where it cannot go is one line before anything is shown."""
    out = run(tmp_path / "out", "source=file", f"source.path={shakespeare}")
    (tmp_path / "a_file").write_text("not a folder")
    r = inspect_cli(out, "--plot", where, cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("corpusprep.inspect: error: ") and where in r.stderr
    assert "not a folder" in r.stderr and not r.stdout

"""The sweep of issue 14, as written there: `-m tokenizer.vocab_size=512,1024,2048` on
python_stdlib (about 30 MB of code, one document per file) with tokenizer=bpe gives the
comparison table (val bytes, bytes per token, vocabulary use) and, in inspect, the figure
of compression against vocabulary size."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
from helpers import run_cli


@pytest.mark.slow
def test_the_issue_sweep_over_vocabulary_sizes_on_python_stdlib(tmp_path):
    pytest.importorskip("rustbpe")
    pytest.importorskip("matplotlib")
    done = run_cli("-m", "dataset=python_stdlib", "tokenizer=bpe",
                   "tokenizer.vocab_size=512,1024,2048", "hydra.sweep.dir=sweep",
                   cwd=tmp_path, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| val_bytes | bytes_per_token | vocab_use |" in done.stdout  # the table, printed
    with open(tmp_path / "sweep" / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["vocab"]) for r in rows] == [512, 1024, 2048]
    assert len({r["val_bytes"] for r in rows}) == 1  # the same val documents for each
    bpt = [float(r["bytes_per_token"]) for r in rows]
    assert bpt[0] < bpt[1] < bpt[2]
    shown = subprocess.run([sys.executable, "-m", "corpusprep.inspect", "sweep", "--plot",
                            "cmp.png"], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert (tmp_path / "cmp.png").stat().st_size > 20_000
    assert all(f"{b:.3f}" in shown.stdout for b in bpt)

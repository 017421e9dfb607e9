"""Figures of what a run made, and of a sweep's runs side by side:
`python -m corpusprep.inspect DIR --plot FILE.png` (needs `pip install 'corpusprep[plot]'`).

Every figure is computed first as plain numbers (`run_data`, `sweep_data`: numpy arrays and
floats, streamed through the token files in chunks so memory stays flat), then drawn
(`plot_run`, `plot_sweep`, which return those same numbers): what is plotted can be
checked without looking at a picture. matplotlib is imported only to draw, without pyplot
(no GUI backend, no global state).
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np

from corpusprep.dataset import COUNT, SIDES, PreparedDataset, Tokens, check_json, load, read_json
from corpusprep.errors import UserError, escape_controls

CHUNK = 1 << 22  # tokens (or document starts) per step
SAMPLE_TOKENS = 1 << 20  # chars per token by decoding: at most this many tokens per split
SAMPLE_WINDOWS = 64
HIST_BINS = 40
MATPLOTLIB_HINT = "--plot needs matplotlib: pip install 'corpusprep[plot]' (or matplotlib)"


# --- the numbers -----------------------------------------------------------------------


def token_counts(splits: Iterator[tuple[str, Tokens]], vocab_size: int) -> np.ndarray:
    """How often each id occurs over the given splits, chunk by chunk."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for _, ids in splits:
        for i in range(0, len(ids), CHUNK):
            counts += np.bincount(ids[i : i + CHUNK], minlength=vocab_size)[:vocab_size]
    return counts


def rank_frequency(counts: np.ndarray) -> dict[str, Any]:
    """Zipf's plot: the counts of the ids that occur, most frequent first, by rank."""
    freq = np.sort(counts[counts > 0])[::-1]
    return {"ranks": np.arange(1, len(freq) + 1), "frequencies": freq,
            "ids_used": len(freq), "vocab_size": len(counts)}  # fmt: skip


def _lengths(starts: np.ndarray, total: int) -> Iterator[np.ndarray]:
    """Document lengths from where documents start, in chunks."""
    n = len(starts)
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        first = np.asarray(starts[a:b], dtype=np.int64)
        yield np.diff(np.append(first, int(starts[b]) if b < n else total))


def document_lengths(ds: PreparedDataset, bins: int = HIST_BINS) -> dict[str, Any]:
    """A histogram of document lengths in tokens, per split, on shared log-spaced bins
    from the shortest to the longest document (edges are whole numbers: bin i counts
    lengths in [edges[i], edges[i+1])); empty documents are counted apart. For one text
    there is no document index: each split is one document."""
    tokens = {side: len(ids) for side, ids in ds.splits()}
    if all(ds.docs(side) is None for side in SIDES):
        return {"one_text": True, "tokens": tokens}
    lo, hi = None, 1
    for side in SIDES:
        for chunk in _lengths(ds.docs(side), tokens[side]):
            chunk = chunk[chunk > 0]  # empty documents are counted apart (no log of 0)
            if len(chunk):
                lo = int(chunk.min()) if lo is None else min(lo, int(chunk.min()))
                hi = max(hi, int(chunk.max()))
    lo = lo or 1
    edges = np.floor(np.logspace(math.log10(lo), math.log10(hi + 1), bins + 1)).astype(np.int64)
    edges = np.unique(np.concatenate([[lo], edges, [hi + 1]]))
    out: dict[str, Any] = {"one_text": False, "edges": edges, "counts": {}, "documents": {},
                           "empty": {}, "tokens": {}, "mean": {}}  # fmt: skip
    for side in SIDES:
        counts, docs, empty, total = np.zeros(len(edges) - 1, np.int64), 0, 0, 0
        for chunk in _lengths(ds.docs(side), tokens[side]):
            counts += np.histogram(chunk[chunk > 0], edges)[0]
            docs += len(chunk)
            empty += int((chunk == 0).sum())
            total += int(chunk.sum())
        out["counts"][side], out["documents"][side] = counts, docs
        out["empty"][side], out["tokens"][side] = empty, total
        out["mean"][side] = total / docs if docs else 0.0
    return out


def chars_per_token(ds: PreparedDataset, sample: int = SAMPLE_TOKENS) -> dict[str, Any]:
    """Characters per token of each split. Exact from the manifest when the split is by
    position (it records each side's characters); otherwise by decoding: the whole split
    when it has at most `sample` tokens, else `SAMPLE_WINDOWS` windows spread evenly over
    it. End-of-text tokens count as tokens but add no characters, as in the manifest."""
    m = ds.manifest
    split = m.get("split", {})
    values, method = {}, {}
    if split.get("by") == "position" and "train_chars" in split and "val_chars" in split:
        for side in SIDES:
            values[side] = split[f"{side}_chars"] / max(m["tokens"][side], 1)
            method[side] = "exact (manifest)"
    else:
        eot = (m.get("eot") or {}).get("id")
        for side, ids in ds.splits():
            n = len(ids)
            if n <= sample:
                windows = [(0, n)]
            else:
                width = sample // SAMPLE_WINDOWS
                windows = [(int(s), int(s) + width)
                           for s in np.linspace(0, n - width, SAMPLE_WINDOWS)]  # fmt: skip
            chars = tokens = 0
            for a, b in windows:
                part = np.asarray(ids[a:b])
                tokens += len(part)
                if eot is not None:
                    part = part[part != eot]
                chars += len(ds.tokenizer.decode_bytes(part).decode("utf-8", "replace"))
            values[side] = chars / max(tokens, 1)
            method[side] = "exact (decoded)" if n <= sample else f"estimated ({tokens:,} tokens)"
    return {"values": values, "method": method, "overall": m["chars_per_token"]}


def run_data(ds: PreparedDataset) -> dict[str, Any]:
    check_json(ds.manifest, ds.path / "manifest.json", {}, ("chars_per_token",))
    counts = token_counts(ds.splits(), ds.manifest["vocab_size"])
    return {"frequency": rank_frequency(counts), "documents": document_lengths(ds),
            "chars_per_token": chars_per_token(ds)}  # fmt: skip


def is_sweep(folder: Path) -> bool:
    from corpusprep.sweep import RECORD

    folder = Path(folder)
    if (folder / "manifest.json").is_file():
        return False
    return (folder / "summary.csv").is_file() or any(folder.glob(f"*/{RECORD}"))


def sweep_data(folder: str | Path) -> dict[str, Any]:
    """One entry per job of a sweep folder (its corpusprep_job.json records, in job
    order): tokens, chars per token and vocabulary use (distinct ids / vocab size), from
    each job's out_dir. Jobs that failed or made nothing have None values. A job is
    labelled by the overrides in which it differs from the others."""
    from corpusprep.sweep import RECORD, read_jobs, this_sweeps

    folder = Path(folder)
    records, written = [], []  # (and when each record was written: the newest counts)
    for path in folder.glob(f"*/{RECORD}"):
        record = read_json(path, MAX_RECORD_BYTES, SWEEP_FIX)
        check_json(record, path, RECORD_KEYS, fix=SWEEP_FIX)
        records.append((record.get("job", 0), path.parent, record))
        with contextlib.suppress(OSError):  # (gone since it was read: left out)
            written.append((path.stat().st_mtime_ns, record))
    if not records:
        raise UserError(f"{folder}: no job records ({RECORD}) in its folders; not a sweep folder")
    jobs = read_jobs(folder)
    if jobs is not None:  # the last sweep's jobs: a folder given again holds older ones
        kept = {id(r) for r in this_sweeps(written, jobs)}
        records = [r for r in records if id(r[2]) in kept]
        recorded = {r[0] for r in records}
        records += [(job, None, {"job": job, "overrides": overrides, "status": "no record"})
                    for job, overrides in enumerate(jobs) if job not in recorded]  # fmt: skip
    records.sort(key=lambda r: r[0])
    keys = ("train_tokens", "val_tokens", "chars_per_token", "vocab_size", "ids_used", "vocab_use",
            "val_bytes", "bytes_per_token")  # fmt: skip
    out: dict[str, Any] = {"labels": [], "jobs": [], "status": [], "overrides": [],
                           **{k: [] for k in keys}}  # fmt: skip
    # a job's label: its overrides that not every job shares (source=file, ...)
    common = set.intersection(*(set(r.get("overrides") or []) for _, _, r in records))
    if len(records) == 1:
        common = set()
    for job, job_folder, record in records:
        overrides = list(record.get("overrides") or [])
        out["jobs"].append(job)
        out["overrides"].append(overrides)
        out["labels"].append(",".join(o for o in overrides if o not in common) or f"job {job}")
        status = record.get("status", "?")
        values: dict[str, Any] = dict.fromkeys(keys)
        if status in ("ok", "skipped"):
            out_dir = _job_out_dir(record, job_folder)
            if out_dir is None:
                status = "missing"
            else:
                ds = load(out_dir, tokenizer=False)
                m = ds.manifest
                check_json(m, out_dir / "manifest.json", {}, ("chars_per_token",))
                used = m.get("vocab_used")  # counted by the run; else here
                if used is None:
                    used = int((token_counts(ds.splits(), m["vocab_size"]) > 0).sum())
                values.update(train_tokens=m["tokens"]["train"], val_tokens=m["tokens"]["val"],
                              chars_per_token=m["chars_per_token"], vocab_size=m["vocab_size"],
                              ids_used=used, vocab_use=used / m["vocab_size"],
                              val_bytes=m.get("val_bytes"),
                              bytes_per_token=m.get("bytes_per_token"))  # fmt: skip
        out["status"].append(status)
        for k in keys:
            out[k].append(values[k])
    return out


# A job record (sweep.py) is read from a folder that may come from anyone, like a manifest
MAX_RECORD_BYTES = 1 << 20  # its overrides and a few labels: a few KB
RECORD_KEYS = {"job": (COUNT,), "overrides": (list, None), "overrides.[]": (str,),
               "status": (str,), "out_dir": (str, None)}  # fmt: skip
SWEEP_FIX = "run the sweep again"


def _job_out_dir(record: dict[str, Any], job_folder: Path) -> Optional[Path]:
    """The job's out_dir as recorded; else the job's own folder (the default out_dir), in
    case the sweep folder was moved."""
    for candidate in (record.get("out_dir"), job_folder):
        if candidate and (Path(candidate) / "manifest.json").is_file():
            return Path(candidate)
    return None


# --- the drawing -----------------------------------------------------------------------


def _figure(width: float, height: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(MATPLOTLIB_HINT) from None
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# names of the figure formats other than PNG (matplotlib's, and the usual image ones)
OTHER_FIGURE_SUFFIXES = {".bmp", ".eps", ".gif", ".jpeg", ".jpg", ".pdf", ".pgf", ".ps",
                         ".raw", ".rgba", ".svg", ".svgz", ".tif", ".tiff", ".webp"}  # fmt: skip


def check_target(path: str | Path) -> None:
    """Where a figure goes: nothing yet, an empty file or an earlier figure (a PNG). Any
    other file is not replaced (`--plot out/train.bin`: the folder it reads), and a name of
    another format is refused: the figure is always a PNG, which `fig.svg` would not be."""
    suffix = Path(path).suffix
    if suffix.lower() in OTHER_FIGURE_SUFFIXES:
        raise UserError(f"{path}: the figure is a PNG, not {suffix}; name it "
                        f"{Path(path).with_suffix('.png')}")  # fmt: skip
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):  # said now, not after the summary a run prints first
        raise UserError(f"{path}: cannot write the figure ({folder} is not a folder); make "
                        "it first, or give the figure a path in one")  # fmt: skip
    try:
        info = os.stat(path)
    except OSError:  # nothing there (or a folder it cannot write to: _save says so)
        return
    if not stat.S_ISREG(info.st_mode) or not info.st_size:
        return
    with contextlib.suppress(OSError), open(path, "rb") as f:  # unreadable: not a figure
        if f.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE:
            return
    raise UserError(f"{path}: a file that is not a PNG figure is there; give the figure "
                    "another name (FILE.png), or remove that file first")  # fmt: skip


def _save(fig, path: str | Path) -> None:
    """Write the PNG under a temporary name, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):  # a read-only folder: there is none to remove
            tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write the figure ({e.strerror or e})") from None


def plot_run(ds: PreparedDataset, path: str | Path) -> dict[str, Any]:
    """One figure: rank/frequency of the ids (log-log), document lengths, chars per token
    per split. Returns the plotted numbers (run_data)."""
    check_target(path)
    data = run_data(ds)
    fig = _figure(15, 4.6)
    ax_f, ax_d, ax_c = fig.subplots(1, 3)
    m = ds.manifest
    tok = m["tokenizer"]
    fig.suptitle(
        f"{m.get('name')}: {tok.get('encoding') or tok.get('kind')} tokens, vocab "
        f"{m['vocab_size']:,}, {m['tokens']['train']:,} train + {m['tokens']['val']:,} val "
        f"({ds.format} format)"
    )
    freq = data["frequency"]
    ax_f.loglog(freq["ranks"], freq["frequencies"], color="tab:blue", lw=1.5)
    used = f"{freq['ids_used']:,} of {freq['vocab_size']:,} ids used"
    ax_f.set(xlabel="rank", ylabel="occurrences (train + val)", title=f"token frequency: {used}")
    ax_f.grid(True, which="major", alpha=0.3)

    docs = data["documents"]
    if docs["one_text"]:
        ax_d.set_axis_off()
        t = docs["tokens"]
        ax_d.text(0.5, 0.5, "one text: no document index\n(train and val are one document "
                  f"each:\n{t['train']:,} and {t['val']:,} tokens)", ha="center", va="center",
                  transform=ax_d.transAxes, fontsize=11)  # fmt: skip
        ax_d.set_title("document length")
    else:
        for side, color in (("train", "tab:blue"), ("val", "tab:orange")):
            label = f"{side}: {docs['documents'][side]:,} docs, mean {docs['mean'][side]:,.0f}"
            if docs["empty"][side]:
                label += f" ({docs['empty'][side]:,} empty)"
            ax_d.stairs(docs["counts"][side], docs["edges"], color=color, lw=1.5, label=label)
        ax_d.set_xscale("log")
        ax_d.set(xlabel="tokens per document", ylabel="documents", title="document length")
        ax_d.legend(fontsize=9)
        ax_d.grid(True, alpha=0.3)

    cpt = data["chars_per_token"]
    values = [cpt["values"][s] for s in SIDES]
    bars = ax_c.bar(list(SIDES), values, color=["tab:blue", "tab:orange"], width=0.6)
    ax_c.bar_label(bars, labels=[f"{v:.3f}\n{cpt['method'][s]}" for v, s in zip(values, SIDES)],
                   padding=2, fontsize=9)  # fmt: skip
    ax_c.axhline(cpt["overall"], color="gray", ls="--", lw=1, label=f"all: {cpt['overall']:.3f}")
    ax_c.set_ylim(0, max(values + [cpt["overall"]]) * 1.35)
    ax_c.set(ylabel="characters per token", title="chars per token")
    ax_c.legend(loc="upper left", fontsize=9)
    _save(fig, path)
    return data


def plot_sweep(folder: str | Path, path: str | Path) -> dict[str, Any]:
    """One figure comparing a sweep's jobs: tokens (train + val), chars per token, and
    vocabulary use. Returns the plotted numbers (sweep_data)."""
    check_target(path)
    data = sweep_data(folder)
    n = len(data["labels"])
    curve = compression_curve(data)
    fig = _figure(15, 1.6 + 0.45 * n + (3.2 if curve else 0))
    if curve:  # the bars on top, compression against vocabulary size below
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.6 + 0.45 * n, 3.2])
        axes = top.subplots(1, 3, sharey=True)
        _plot_curve(bottom.subplots(1, 1), curve)
    else:
        axes = fig.subplots(1, 3, sharey=True)
    y = np.arange(n)
    labels = [f"{label} [{s}]" if s not in ("ok", "skipped") else label
              for label, s in zip(data["labels"], data["status"])]  # fmt: skip

    def zeros(key):
        return np.array([v or 0 for v in data[key]], dtype=float)

    train, val = zeros("train_tokens"), zeros("val_tokens")
    axes[0].barh(y, train, color="tab:blue", label="train")
    axes[0].barh(y, val, left=train, color="tab:orange", label="val")
    axes[0].set(xlabel="tokens", title="tokens")
    axes[0].legend(fontsize=9)
    axes[0].set_yticks(y, labels, fontsize=9)
    axes[0].invert_yaxis()
    cpt = axes[1].barh(y, zeros("chars_per_token"), color="tab:green")
    cpt_labels = ["" if v is None else f"{v:.3f}" for v in data["chars_per_token"]]
    axes[1].bar_label(cpt, labels=cpt_labels, padding=2, fontsize=9)
    axes[1].set(xlabel="characters per token", title="chars per token")
    use = zeros("vocab_use") * 100
    bars = axes[2].barh(y, use, color="tab:purple")
    axes[2].bar_label(bars, padding=2, fontsize=9, labels=[
        "" if u is None else f"{u:,} / {v:,}" for u, v in zip(data["ids_used"], data["vocab_size"])
    ])  # fmt: skip
    axes[2].set(xlabel="% of the vocabulary used", title="vocabulary use (distinct ids used)")
    axes[2].set_xlim(0, 119)
    for ax in axes[1:]:
        ax.margins(x=0.15)
    fig.suptitle(f"sweep {Path(folder).resolve()}: {n} jobs")
    _save(fig, path)
    return data


def compression_curve(data: dict[str, Any]) -> Optional[dict[str, list]]:
    """Val bytes per token against vocabulary size, for a sweep whose jobs differ in it
    (tokenizer.vocab_size=1024,4096,16384): one line per other setting, by vocab size."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for label, vocab, bpt in zip(data["labels"], data["vocab_size"], data["bytes_per_token"]):
        if vocab is None or not bpt:
            continue
        rest = ",".join(o for o in label.split(",") if not o.startswith("tokenizer.vocab_size="))
        lines.setdefault(rest, []).append((vocab, bpt))
    if not any(len({v for v, _ in points}) > 1 for points in lines.values()):
        return None
    return {"series": [{"label": rest or "all", "vocab_size": [v for v, _ in sorted(points)],
                        "bytes_per_token": [b for _, b in sorted(points)]}
                       for rest, points in lines.items()]}  # fmt: skip


def _plot_curve(ax, curve: dict[str, list]) -> None:
    for series in curve["series"]:
        ax.plot(series["vocab_size"], series["bytes_per_token"], marker="o", label=series["label"])
        for x, y in zip(series["vocab_size"], series["bytes_per_token"]):
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=9)  # fmt: skip
    ax.set_xscale("log", base=2)
    sizes = sorted({v for series in curve["series"] for v in series["vocab_size"]})
    ax.set_xticks(sizes, [f"{v:,}" for v in sizes])
    ax.minorticks_off()
    ax.set(
        xlabel="vocabulary size",
        ylabel="val bytes per token",
        title="compression against vocabulary size (higher: fewer tokens per byte)",
    )
    if len(curve["series"]) > 1:
        ax.legend(fontsize=9)
    ax.margins(y=0.2)


def sweep_table(data: dict[str, Any]) -> str:
    """The numbers of sweep_data as a text table."""
    lines = [
        f"  {'job':>3}  {'train':>12}  {'val':>10}  {'chars/tok':>9}  {'bytes/tok':>9}  "
        f"{'vocab use':>17}  run"
    ]  # bytes/tok: of the val text
    for i, label in enumerate(data["labels"]):
        label = escape_controls(label)  # a stranger's record's: a line end would fake a row
        if data["train_tokens"][i] is None:
            status = escape_controls(data["status"][i])
            lines.append(f"  {data['jobs'][i]:>3}  {status:>12}  {'':>10}  "
                         f"{'':>9}  {'':>9}  {'':>17}  {label}")  # fmt: skip
            continue
        use = f"{data['ids_used'][i]:,}/{data['vocab_size'][i]:,}"
        bpt = data["bytes_per_token"][i]
        lines.append(
            f"  {data['jobs'][i]:>3}  {data['train_tokens'][i]:>12,}  {data['val_tokens'][i]:>10,}"
            f"  {data['chars_per_token'][i]:>9.3f}  {'' if bpt is None else f'{bpt:.3f}':>9}"
            f"  {use:>17}  {label}"
        )
    return "\n".join(lines)

"""A look at what a run made: `python -m corpusprep.inspect DIR [--top N] [--verify]
[--plot FILE.png]`.

Prints the manifest as a table, the most frequent tokens, characters and bytes per token,
and the first tokens of val decoded. --verify decodes train + val and compares them with
the source text, byte for byte (for lossless tokenizers: char, byte, tiktoken). --plot
draws token frequencies, document lengths and chars per token (corpusprep.plot; needs
matplotlib). Any output format reads back (nanogpt, llmc, npy, megatron).

DIR may also be a sweep folder (summary.csv and a folder per job): its jobs are compared,
as a table, and with --plot in one figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np

from corpusprep.dataset import PreparedDataset, load
from corpusprep.errors import UserError
from corpusprep.redact import redact_text

CHUNK = 1 << 22  # tokens per step: memory stays flat however big the files are


def token_counts(ds: PreparedDataset) -> np.ndarray:
    from corpusprep.plot import token_counts as count  # numbers only: no matplotlib

    return count(ds.splits(), ds.manifest["vocab_size"])


def describe_format(ds: PreparedDataset) -> str:
    fmt = ds.manifest.get("format") or {}
    files = {side: len(ds.files.get(side, [])) for side in ("train", "val")}
    text = f"{ds.format}: {files['train']} train + {files['val']} val files"
    if "shard_tokens" in fmt:
        text += f", shard_tokens {fmt['shard_tokens']:,}"
    if "magic" in fmt:
        text += f", magic {fmt['magic']} version {fmt['version']}"
    if "dtype_code" in fmt:
        text += f", dtype code {fmt['dtype_code']} ({fmt['token_dtype']})"
    return text


def summary(ds: PreparedDataset, top: int = 10, head: int = 64) -> str:
    m = ds.manifest
    src, tok = m["source"], m["tokenizer"]
    tokens = m["tokens"]["train"] + m["tokens"]["val"]
    rows = [
        ("name", m.get("name")),
        ("source", redact_text(src.get("url") or src.get("path") or src["file"])),
        ("  bytes", f"{src['bytes']:,}  sha256 {src['sha256']}"),
        (
            "tokenizer",
            ", ".join(
                f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in tok.items() if _short(v)
            ),
        ),  # fmt: skip
        ("vocab_size", f"{m['vocab_size']:,}"),
        ("dtype", m["dtype"]),
        ("format", describe_format(ds)),
        ("train", f"{m['tokens']['train']:,} tokens  ({ds.train.nbytes:,} bytes)"),
        ("val", f"{m['tokens']['val']:,} tokens  ({ds.val.nbytes:,} bytes)"),
        ("chars/token", f"{m['chars'] / tokens:.3f}"),
        ("bytes/token", f"{src['bytes'] / tokens:.3f}  (input bytes per token)"),
        ("made", f"{m['created']} by corpusprep {m['corpusprep']} in {m['seconds']['total']} s"),
    ]
    out = [str(ds.path)] + [f"  {k:<12} {v}" for k, v in rows]
    if "nanogpt_note" in m:
        out.append(f"  {'note':<12} {m['nanogpt_note']}")

    counts = token_counts(ds)
    order = np.argsort(-counts, kind="stable")[:top]
    out += ["", f"most frequent tokens (train + val, {int((counts > 0).sum()):,} ids used):"]
    out.append(f"  {'rank':>4}  {'id':>7}  {'count':>12}  {'share':>6}  token")
    for rank, i in enumerate(order, 1):
        if counts[i] == 0:
            break
        share = counts[i] / tokens
        text = ds.tokenizer.decode_bytes([int(i)]).decode("utf-8", errors="replace")
        out.append(f"  {rank:>4}  {int(i):>7}  {int(counts[i]):>12,}  {share:>6.2%}  {text!r}")
    out += ["", f"val starts with ({min(head, len(ds.val))} tokens):"]
    out.append("  " + repr(ds.tokenizer.decode_bytes(ds.val[:head]).decode("utf-8", "replace")))
    return "\n".join(out)


def verify(ds: PreparedDataset) -> str:
    """Check every output file's sha256 against the manifest, then decode train + val and
    compare with the source text as nanoGPT reads it."""
    from corpusprep.sources.url import sha256_file
    from corpusprep.text import read_text
    from corpusprep.writer import changed_files

    changed = changed_files(ds.path, ds.manifest)
    if changed is None:
        raise UserError(f"{ds.path}: the manifest lists no sha256 of its files; prepare it again")
    if changed:
        raise UserError(
            f"{ds.path / changed[0]}: its sha256 is not the manifest's; the folder is damaged "
            "or mixed with another run: prepare it again"
        )

    src = Path(ds.manifest["source"]["file"])
    if not src.is_file():
        raise UserError(f"{src}: the source file is gone; cannot verify")
    if sha256_file(src) != ds.manifest["source"]["sha256"]:
        raise UserError(f"{src}: the source changed since the run (sha256 differs); cannot verify")
    expected = (text.encode("utf-8") for text in read_text(src))
    decoded = (
        ds.tokenizer.decode_bytes(ids[i : i + CHUNK])
        for _, ids in ds.splits()
        for i in range(0, len(ids), CHUNK)
    )
    where = _first_difference(expected, decoded)
    if where is not None:
        raise UserError(
            f"{ds.path}: decoding train + val differs from {src} at byte {where:,} of the text"
        )
    return (
        f"verified: decoding train + val gives back {src} exactly ({ds.manifest['chars']:,} chars)"
    )


def _first_difference(a: Iterator[bytes], b: Iterator[bytes]) -> Optional[int]:
    """Where two byte streams, cut into different chunks, first differ; None if equal."""
    a, b = (x for x in a if x), (x for x in b if x)
    offset, xa, xb = 0, b"", b""
    while True:
        xa, xb = xa or next(a, b""), xb or next(b, b"")
        if not xa or not xb:
            return None if xa == xb else offset  # one stream is longer
        n = min(len(xa), len(xb))
        if xa[:n] != xb[:n]:
            return offset + next(i for i in range(n) if xa[i] != xb[i])
        xa, xb, offset = xa[n:], xb[n:], offset + n


def _need_matplotlib() -> None:
    """--plot without matplotlib: one line saying how to get it, before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from corpusprep.plot import MATPLOTLIB_HINT

        raise UserError(MATPLOTLIB_HINT) from None


def _is_sweep(folder: Path) -> bool:
    from corpusprep.plot import is_sweep

    return is_sweep(folder)


def _short(value: object) -> bool:
    return not isinstance(value, (dict, list)) and len(str(value)) <= 80


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m corpusprep.inspect", description="Look at a corpusprep output folder."
    )
    parser.add_argument("dir", help="an out_dir of a finished run")
    parser.add_argument("--top", type=int, default=10, help="how many frequent tokens to show")
    parser.add_argument("--verify", action="store_true", help="decode and compare with source")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw a figure (token frequency, document lengths, chars per token; for a sweep "
        "folder: its jobs compared); needs matplotlib",
    )
    args = parser.parse_args(argv)
    try:
        if args.plot:
            _need_matplotlib()
        if _is_sweep(Path(args.dir)):
            from corpusprep import plot

            if args.verify:
                raise UserError(f"{args.dir}: --verify takes a run's out_dir, not a sweep folder")
            data = plot.plot_sweep(args.dir, args.plot) if args.plot else plot.sweep_data(args.dir)
            print(f"{args.dir}: {len(data['labels'])} jobs\n" + plot.sweep_table(data))
        else:
            ds = load(args.dir)
            print(summary(ds, args.top))
            if args.verify:
                print("\n" + verify(ds))
            if args.plot:
                from corpusprep.plot import plot_run

                plot_run(ds, args.plot)
        if args.plot:
            print(f"\nwrote {args.plot}")
    except UserError as e:
        print(f"corpusprep.inspect: error: {redact_text(e)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""A look at what a run made: `python -m corpusprep.inspect DIR [--top N] [--verify]
[--plot FILE.png]`.

Prints the manifest as a table, the most frequent tokens, characters and bytes per token,
and the first tokens of val decoded. --verify checks every input file against its own
sha256, then decodes train + val and compares them with the text the run read, byte for
byte, document by document (for lossless tokenizers: char, byte, tiktoken). --plot
draws token frequencies, document lengths and chars per token (corpusprep.plot; needs
matplotlib). Any output format reads back (nanogpt, llmc, npy, megatron).

DIR may also be a sweep folder (summary.csv and a folder per job): its jobs are compared,
as a table, and with --plot in one figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn, Optional

import numpy as np

from corpusprep.dataset import (
    SUMMARY_NEEDS,
    VERIFY_KEYS,
    VERIFY_NEEDS,
    PreparedDataset,
    _damaged,
    _shown,
    check_json,
    load,
)
from corpusprep.errors import UserError, escape_controls
from corpusprep.redact import redact_text

CHUNK = 1 << 18  # ids decoded per step (as a list, ~10 MB): memory stays flat


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
        text += f", magic {fmt['magic']} version {fmt.get('version')}"
    if "dtype_code" in fmt:
        text += f", dtype code {fmt['dtype_code']} ({fmt.get('token_dtype')})"
    return text


def _source_name(src: dict[str, Any]) -> str:
    """The URL, path or glob the text came from, with the file count where several."""
    hub = f"{src['dataset']} (Hugging Face Hub)" if src.get("dataset") else None
    name = src.get("url") or src.get("path") or ", ".join(src.get("glob") or []) or hub
    name = name or src.get("file") or "?"
    files = len(src.get("files") or [])
    return f"{name}  ({files:,} files)" if files > 1 else name


def summary(ds: PreparedDataset, top: int = 10, head: int = 64) -> str:
    m = ds.manifest
    check_json(m, ds.path / "manifest.json", {}, SUMMARY_NEEDS)  # load() checked their kinds
    src, tok = m["source"], m["tokenizer"]
    tokens = m["tokens"]["train"] + m["tokens"]["val"]
    rows = [
        ("name", m.get("name")),
        ("source", redact_text(_source_name(src))),
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
        ("chars/token", f"{m['chars'] / max(tokens, 1):.3f}  (train + val)"),
    ]
    if m.get("bytes_per_token"):  # written since 0.1: the val text's, to compare tokenizers
        rows.append(("bytes/token", f"{m['bytes_per_token']:.3f}  (val's UTF-8 bytes per token)"))
    rows.append(
        ("made", f"{m['created']} by corpusprep {m['corpusprep']} in {m['seconds']['total']} s")
    )
    note = m.get("note") or m.get("nanogpt_note")  # nanogpt's, under its first key
    if note:
        rows.append(("note", note))
    # a value is one row: a stranger's line end in one would fake a row of its own
    out = [str(ds.path)] + [f"  {k:<12} {escape_controls(str(v))}" for k, v in rows]

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
    """Check every output file's sha256 against the manifest and every input file's against
    its own recorded one, then decode train + val and compare them with the text the run
    read, byte for byte: each document framed as the run framed it (end-of-text ids, a
    tokenizer's own specials), on its side, in its place (order=shuffle: by the index)."""
    from corpusprep.writer import changed_files

    check_json(ds.manifest, ds.path / "manifest.json", VERIFY_KEYS, VERIFY_NEEDS)
    changed = changed_files(ds.path, ds.manifest)
    if changed is None:
        raise UserError(f"{ds.path}: the manifest lists no sha256 of its files; prepare it again")
    if changed:
        raise UserError(
            f"{ds.path / changed[0]}: its sha256 is not the manifest's; the folder is damaged "
            "or mixed with another run: prepare it again"
        )
    files, keys = _input_files(ds.manifest, ds.path)
    _check_documents(ds, files)
    streams, writers = _streams(ds)
    try:
        _replay(ds, files, keys, writers)
        for stream in streams:
            stream.finish()
    except _Differs as e:
        where = e.file or (files[0].name if len(files) == 1 else f"its {len(files)} input files")
        what = "the text" if e.doc is None else f"document {e.doc + 1:,} (counting from 1)"
        raise UserError(
            f"{ds.path}: decoding {e.stream.label} differs from {where} at byte {e.offset:,} "
            f"of {what}; prepare it again"
        ) from None
    # a stranger's file name: its line end is escaped too (the output keeps its own)
    what = escape_controls(files[0].name) if len(files) == 1 else f"its {len(files):,} input files"
    docs = ds.manifest.get("documents", {}).get("total")
    docs = f", {docs:,} documents" if docs and len(files) > 1 else ""
    chars = ds.manifest["chars"]
    return f"verified: decoding train + val gives back {what} exactly ({chars:,} chars{docs})"


def _input_files(manifest: dict, folder: Path) -> tuple[list, dict[str, bytes]]:
    """The run's input files, rebuilt from the manifest, each checked against its own
    sha256; and the keys the run gave documents read in pieces (by file)."""
    from corpusprep.formats import InputFile
    from corpusprep.prepare import _member_digest
    from corpusprep.sources import ReadOptions
    from corpusprep.writer import file_sha256

    src = manifest["source"]
    listed = src.get("files") or [{"path": src.get("file"), "sha256": src["sha256"],
                                   "format": "text", "compression": "none",
                                   "bytes": src.get("bytes")}]  # fmt: skip
    # bytes too: a file of another size is told unread (a planted sparse TB, say)
    missing = [k for f in listed for k in ("path", "sha256", "format", "compression", "bytes")
               if f.get(k) is None]  # fmt: skip
    if missing:  # their kinds: VERIFY_KEYS
        raise _damaged(folder / "manifest.json", f"a file of source.files has no {missing[0]}")
    given = (manifest.get("config") or {}).get("source") or {}
    options = {k: given[k] for k in ReadOptions.__dataclass_fields__ if k in given}
    options.pop("format", None)  # each file's own is listed
    try:
        ReadOptions(**options)  # the run's own rules for them (a separator's length among them)
    except UserError as e:
        raise _damaged(folder / "manifest.json", f"config.{e}") from None
    members = Counter(f["path"] for f in listed)
    files, keys, digests = [], {}, {}
    for f in listed:
        path = Path(f["path"])
        if f["path"] not in digests:
            if not path.is_file():
                raise UserError(f"{path}: the source file is gone; cannot verify")
            size, recorded = path.stat().st_size, f["bytes"]
            if size != recorded:  # told unread: a manifest may point at any file
                raise UserError(f"{path}: the source changed since the run ({size:,} bytes, "
                                f"not {recorded:,}); cannot verify: prepare the folder "
                                "again")  # fmt: skip
            digests[f["path"]] = file_sha256(path)
            if digests[f["path"]] != f["sha256"]:
                raise UserError(
                    f"{path}: the source changed since the run (sha256 differs from the "
                    "manifest's); cannot verify: prepare the folder again"
                )
        file = InputFile(path=f["path"], format=f["format"], compression=f["compression"],
                         size=path.stat().st_size // members[f["path"]], member=f.get("member"),
                         **options)  # fmt: skip
        files.append(file)
        keys[file.name] = _member_digest(bytes.fromhex(digests[f["path"]]), file.member)[:16]
    return files, keys


def _check_documents(ds: PreparedDataset, files: list) -> None:
    """documents.total, of which the split's permutation is made (a bool and an int64 each):
    the count the document index lists (one less: a document cut between the sides), or
    without an index (one text) at most one per input byte and file. A manifest may say
    10**12 (931 GiB)."""
    total = ds.manifest["documents"]["total"]
    if ds.train_docs is not None and ds.val_docs is not None:
        indexed = len(ds.train_docs) + len(ds.val_docs)
        if total in (indexed, indexed - 1):
            return
        detail = f"but the document index lists {indexed:,}"
    else:
        most = sum(f.size for f in files) + len(files)
        if total <= most:
            return
        detail = f"more than its input's {most - len(files):,} bytes can hold"
    raise _damaged(ds.path / "manifest.json", f"documents.total is {total:,}, {detail}")


def _streams(ds: PreparedDataset) -> tuple[list[_Check], dict[str, _Check]]:
    """What the decoded ids are compared in: one stream in corpus order (split by position:
    train then val; head/tail: the stream the cut was made in), or one per side (split by
    document or hash); and which of them each side the run wrote to feeds."""
    from corpusprep.dataset import ShardedTokens
    from corpusprep.split import permutation, val_document_count, val_documents

    m, decode = ds.manifest, ds.tokenizer.decode_bytes
    split, docs = m["split"], m["documents"]["total"]
    by = split["by"]
    seed = split.get("seed", m.get("order", {}).get("seed"))
    shuffle = m.get("order", {}).get("kind") == "shuffle"
    if shuffle and ds.train_docs is None:
        raise UserError(
            f"{ds.path}: order=shuffle, and the folder keeps no document index, so --verify "
            "cannot tell where each document went; prepare it with one to verify it"
        )
    if by in ("document", "hash"):
        orders: dict[str, Optional[np.ndarray]] = {"train": None, "val": None}
        if shuffle:  # as prepare._side_orders: each side's documents in the permutation's order
            val = val_documents(
                docs, val_document_count(docs, split["fraction"], split.get("val_size")), seed
            )
            perm = permutation(docs, seed)
            for side, mask in (("val", val), ("train", ~val)):
                local = (np.cumsum(mask) - 1)[perm[mask[perm]]]
                orders[side] = np.argsort(local)  # the k-th document written: its place
        sides = {side: _Check(f"{side}.bin", getattr(ds, side), decode,
                              getattr(ds, f"{side}_docs"), orders[side])
                 for side in ("train", "val")}  # fmt: skip
        return list(sides.values()), sides
    first, second = ("val", "train") if by == "head" else ("train", "val")
    ids = ShardedTokens([getattr(ds, first), getattr(ds, second)])
    starts = None
    if ds.train_docs is not None:
        shift = np.uint64(len(getattr(ds, first)))
        before, after = getattr(ds, f"{first}_docs"), getattr(ds, f"{second}_docs")
        if len(before) + len(after) > docs:  # a cut document: its rest begins the second side
            after = after[1:]
        starts = np.concatenate([before, after + shift])
    order = np.argsort(permutation(docs, seed)) if shuffle else None
    stream = _Check(f"{first}.bin + {second}.bin", ids, decode, starts, order)
    return [stream], {"train": stream, "val": stream}


def _replay(ds: PreparedDataset, files: list, keys: dict[str, bytes], writers: dict) -> None:
    """Read the input as the run did (its shard plan, so documents are cut the same way)
    and hand each document's text to the writers through the run's own encoding step, with
    the text in place of its ids: the decoded ids must give back exactly that."""
    from corpusprep.formats import get_format
    from corpusprep.prepare import plan
    from corpusprep.shards import EncodeTask, Rules, encode_part
    from corpusprep.split import val_document_count, val_documents

    m = ds.manifest
    split, eot = m["split"], m.get("eot") or {}
    docs = m["documents"]["total"]
    eot_id = eot.get("id")  # decoded where the run wrote it: an id of the vocabulary
    if eot.get("mode") in ("append", "prepend") and (eot_id is None or eot_id >= m["vocab_size"]):
        raise _damaged(ds.path / "manifest.json", f"eot.id is {_shown(eot_id)}, not an id of "
                       f"its {m['vocab_size']:,}-id vocabulary")  # fmt: skip
    val_docs = None
    if split["by"] == "document":  # as prepare.decide, from the document before the first
        val = val_document_count(docs, split["fraction"], split.get("val_size"))
        val_docs = np.concatenate([[False], val_documents(docs, val, split.get("seed", 0))])
    rules = Rules(
        _AsText(ds.tokenizer),
        m["dtype"],
        split["by"],
        split["fraction"],
        split.get("train_chars", 0),
        split.get("seed", 0),
        eot.get("mode", "none"),
        eot.get("id"),
    )
    task = EncodeTask(None, rules, doc_keys=keys, val_docs=val_docs)
    eot_ids = None if eot.get("id") is None else np.array([eot["id"]], dtype=np.uint32)
    doc, position, seen = -1, [0], {"train": [], "val": []}
    config = m.get("config") or {}
    shard_bytes = (m.get("shards") or {}).get("shard_bytes") or config.get("shard_bytes")
    if not shard_bytes:  # the plan cuts the input in pieces of this size: a run records it
        raise _damaged(ds.path / "manifest.json", "no shards.shard_bytes")
    for shard in plan(files, shard_bytes, ds.tokenizer):
        for segment in shard.segments:
            for part in get_format(segment.file.format).parts(segment):
                doc += part.starts
                for w in writers.values():
                    w.file, w.doc = segment.file.name, None if w.starts is None else doc
                encode_part(task, part, doc, keys.get(segment.file.name), position, writers,
                             writers, seen, eot_ids)  # fmt: skip


def _prefixed(prefix: str, pieces: Iterator[str]) -> Iterator[str]:
    """The pieces, `prefix` before the first that holds text: an empty text is encoded as
    no ids at all (sentencepiece gives no dummy prefix for it)."""
    for text in pieces:
        if text and prefix:
            yield prefix
            prefix = ""
        yield text


class _AsText:
    """A tokenizer that gives back the text itself, keeping the real one's specials."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def document_specials(self) -> tuple[np.ndarray, np.ndarray]:
        return self.tokenizer.document_specials()

    def encode_pieces(self, pieces: Iterator[str]) -> Iterator[str]:
        # what the ids of each encoded text decode to before it (SentencePiece's dummy
        # prefix space; not after a cut inside a text: encode_continued)
        prefix = getattr(self.tokenizer, "decoded_prefix", "")
        return _prefixed(prefix, pieces) if prefix else iter(pieces)

    def encode_continued(self, pieces: Iterator[str]) -> Iterator[str]:
        return iter(pieces)


class _Differs(Exception):
    def __init__(self, stream: _Check, offset: int) -> None:
        self.stream, self.offset, self.file, self.doc = stream, offset, stream.file, stream.doc


class _Check:
    """The decoded ids of one output stream, compared with the text the run wrote into it
    as it comes: a writer (write) and a document index (append: a document starts) of the
    run's encoding step. With an index, each document is compared with its own range of
    ids, found by its place (`order`: where the k-th document written went)."""

    def __init__(self, label: str, ids, decode, starts: Optional[np.ndarray] = None,
                 order: Optional[np.ndarray] = None) -> None:  # fmt: skip
        self.label, self.ids, self.decode = label, ids, decode
        self.starts, self.order = starts, order
        self.docs = 0  # documents started so far
        self.pos, self.end = 0, len(ids) if starts is None or not len(starts) else int(starts[0])
        self.held = b""  # decoded, not compared yet
        self.offset = 0  # bytes compared in this stream (with an index: in this document)
        self.file: Optional[str] = None  # where the text being compared comes from
        self.doc: Optional[int] = None
        self.tokens = 0  # read by the encoding step; unused here

    def append(self, _tokens: int) -> None:
        if self.starts is None:
            return  # one text, no index: the stream goes on
        self._close()
        if self.docs >= len(self.starts):
            raise _Differs(self, self.offset)  # more documents than the index lists
        k = self.docs if self.order is None else int(self.order[self.docs])
        self.docs += 1
        self.pos = int(self.starts[k])
        self.end = int(self.starts[k + 1]) if k + 1 < len(self.starts) else len(self.ids)
        self.offset = 0

    def write(self, data) -> None:
        data = data.encode("utf-8") if isinstance(data, str) else self.decode(data)
        while data:
            if not self.held:
                if self.pos >= self.end:
                    raise _Differs(self, self.offset)  # the ids end before the text
                self._read()
                continue
            n = min(len(data), len(self.held))
            if data[:n] != self.held[:n]:
                raise _Differs(
                    self, self.offset + next(i for i in range(n) if data[i] != self.held[i])
                )
            data, self.held, self.offset = data[n:], self.held[n:], self.offset + n

    def _read(self) -> None:
        stop = min(self.pos + CHUNK, self.end)
        # a list: a memmap read one id at a time is 20x slower
        self.held = self.decode(np.asarray(self.ids[self.pos : stop]).tolist())
        self.pos = stop

    def _close(self) -> None:
        """The document (or the text before the first) must have used all its ids."""
        while not self.held and self.pos < self.end:
            self._read()
        if self.held:
            raise _Differs(self, self.offset)  # ids left over: they decode to more text

    def finish(self) -> None:
        self.file = self.doc = None
        self._close()
        if self.starts is not None and self.docs != len(self.starts):
            raise _Differs(self, self.offset)


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


def _count(text: str) -> int:
    """--top's value: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 1 or more")
    return int(text)


def _figure(text: str) -> str:
    """--plot's value: a file name (--plot= gave none: no figure, and nothing said of it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give the figure a file name, e.g. "
                                         "--plot stats.png")  # fmt: skip
    return text


def _print(text: str, file: Any = None) -> None:
    """Text that may hold a manifest's strings, shown escaped where they hold a lone
    surrogate (JSON may spell "\\ud800", which stdout cannot encode: a traceback) or a
    control character (a stranger's terminal escape sequence: a window title, the
    clipboard, lines rewritten); line ends and tabs are the layout's own."""
    text = escape_controls(text, keep_layout=True)
    print(text.encode("utf-8", "backslashreplace").decode("utf-8"), file=file)


def _fail(message: str) -> NoReturn:
    # one line, whatever line ends a stranger's name in it holds
    _print(f"corpusprep.inspect: error: {escape_controls(redact_text(message))}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m corpusprep.inspect", description="Look at a corpusprep output folder."
    )
    # one line, not argparse's usage: the fix is in --help
    parser.error = lambda message: _fail(  # type: ignore[method-assign]
        f"{message}; python -m corpusprep.inspect --help lists the options"
    )
    parser.add_argument("dir", help="an out_dir of a finished run")
    parser.add_argument("--top", type=_count, default=10, help="how many frequent tokens to show")
    parser.add_argument("--verify", action="store_true", help="decode and compare with source")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        type=_figure,
        help="draw a figure (token frequency, document lengths, chars per token; for a sweep "
        "folder: its jobs compared); needs matplotlib",
    )
    args = parser.parse_args(argv)
    try:
        if args.plot:
            _need_matplotlib()
            from corpusprep.plot import check_target

            check_target(args.plot)  # before any work: not over one of the folder's files
        if _is_sweep(Path(args.dir)):
            from corpusprep import plot

            if args.verify:
                raise UserError(f"{args.dir}: --verify takes a run's out_dir, not a sweep folder")
            data = plot.plot_sweep(args.dir, args.plot) if args.plot else plot.sweep_data(args.dir)
            _print(f"{args.dir}: {len(data['labels'])} jobs\n" + plot.sweep_table(data))
        else:
            ds = load(args.dir)
            _print(summary(ds, args.top))
            if args.verify:
                _print("\n" + verify(ds))
            if args.plot:
                from corpusprep.plot import plot_run

                plot_run(ds, args.plot)
        if args.plot:
            _print(f"\nwrote {args.plot}")
    except UserError as e:
        _fail(str(e))
    except BrokenPipeError:  # `| head` has all it wanted: the rest goes nowhere, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, as a shell reports it (Windows has no SIGPIPE)


if __name__ == "__main__":
    main()

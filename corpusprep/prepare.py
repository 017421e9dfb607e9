"""The driver: wires source -> formats -> shards -> tokenizer -> split -> executor -> writer.

1. the source gives its input files (a URL is downloaded into the cache once);
2. they are cut into a fixed plan of shards: pieces of big files (where the tokenizer
   allows a cut) and runs of small files; the plan never depends on the workers;
3. scan pass, in parallel: count characters and documents, collect the distinct
   characters, check every file (UTF-8, JSON, fields) before anything is written;
4. fit the tokenizer if it learns from the corpus (char), pick the dtype, and find the
   split: nanoGPT's first int(n*split) characters, or a seeded hash per document;
5. encode pass, in parallel: every shard encodes its documents and writes its ids;
6. merge the shards' parts in plan order, write meta.pkl and manifest.json, and rename
   everything into place together.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

import corpusprep
from corpusprep.config import Settings, build, read_settings
from corpusprep.errors import UserError
from corpusprep.executors import Executor
from corpusprep.exporters import Exporter, Streams
from corpusprep.formats import InputFile, Segment, get_format
from corpusprep.shards import (
    SIDES,
    EncodeResult,
    EncodeTask,
    Shard,
    Target,
    encode_shard,
    finished,
    scan_shard,
)
from corpusprep.sources import Source
from corpusprep.sources.url import sha256_file
from corpusprep.split import split_point
from corpusprep.tokenizers import NOWHERE, Tokenizer
from corpusprep.writer import (
    OutputWriter,
    changed_files,
    check_free_space,
    choose_dtype,
    disk_errors,
)


def prepare(cfg: DictConfig, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the whole job described by a composed config; returns the manifest."""
    settings = read_settings(cfg)
    source: Source = build(cfg.source, "source")
    tokenizer: Tokenizer = build(cfg.tokenizer, "tokenizer")
    executor: Executor = build(cfg.executor, "executor")
    exporter: Exporter = build(cfg.format, "format")
    # a tokenizer that does not learn knows its ids now: a too-small dtype fails before any work
    dtype = None if tokenizer.needs_fit else choose_dtype(settings.dtype, tokenizer.max_id)
    clock = _Clock()

    # the lock first: another run in this out_dir waits for nothing and mixes nothing; the
    # up-to-date check reads a folder no one is writing. Engines on other machines need the
    # work folder (in out_dir) from the start; a user error still leaves nothing behind.
    with OutputWriter(settings.out_dir) as out:
        return _run(cfg, overrides, settings, source, tokenizer, executor, exporter, dtype,
                    clock, out)  # fmt: skip


def _run(cfg, overrides, settings, source, tokenizer, executor, exporter, dtype, clock,
         out: OutputWriter) -> dict[str, Any]:  # fmt: skip
    files = source.files(progress=not settings.quiet)
    clock.lap("source")
    hashes: dict[str, bytes] = {}
    previous = None if settings.force else finished_manifest(settings.out_dir)
    if previous is not None:  # a finished run is there: redo it only if something changed
        hashes = _hashes(files)
        if previous.get("fingerprint") == fingerprint(cfg, tokenizer, input_sha256(files, hashes)):
            out.remove_stale_work()  # of a run killed after its commit, or superseded
            return {**previous, "skipped": True}
    before = {f.path: os.stat(f.path) for f in files}
    # one text, nanoGPT's case: split by position and no end-of-text tokens, unless asked
    single = is_single_text(files)
    split_by = settings.split_by if settings.split_by != "auto" else (
        "position" if single else "document")  # fmt: skip
    eot = eot_mode(settings.eot, single, tokenizer)
    shards = plan(files, settings.shard_bytes, tokenizer)
    run_key = fingerprint(cfg, tokenizer, _stat_digest(before) + plan_digest(shards))[:20]
    # the executor inside the writer: on any failure its workers stop before the writer
    # removes the work folder they write into
    with executor:
        if not executor.shared_files:
            executor.attach(out.work(run_key))
        scans = list(_progress(executor.map(scan_shard, shards), shards, "scan", settings.quiet))
        clock.lap("scan")
        chars = sum(s.chars for s in scans)
        docs = sum(s.docs for s in scans)
        if docs == 0:
            raise UserError(f"{_name(files)}: no documents to tokenize (all empty or skipped)")
        split_char = (
            split_point(chars, settings.split, _name(files)) if split_by == "position" else 0
        )
        if tokenizer.needs_fit:
            tokenizer.fit("".join(sorted(set("".join(s.charset for s in scans)))),
                          eot=eot != "none")  # fmt: skip
        eot_id = tokenizer.eot_id if eot != "none" else None
        dtype = dtype or choose_dtype(settings.dtype, tokenizer.max_id)
        # documents spread over several shards are assigned by their file's hash: known first
        if split_by == "document" and not hashes:
            hashes = _hashes(files)

        itemsize = np.dtype(dtype).itemsize
        tasks, parts = _encode_tasks(shards, scans, settings, split_by, split_char, eot,
                                     eot_id, tokenizer, dtype, hashes, single, out,
                                     run_key, executor)  # fmt: skip
        work = tasks[0].marker and Path(tasks[0].marker).parent
        done = {}
        if work and any(work.glob("*.done")):  # an earlier run's shards: reuse them only
            hashes = hashes or _hashes(files)  # if the input's content is still the same
            if _recorded_inputs(work) == _input_digests(hashes):
                done = {t.shard.index: r for t in tasks if (r := finished(t, itemsize))}
            for stale in () if done else work.glob("*.done"):
                stale.unlink()
        todo = [t for t in tasks if t.shard.index not in done]
        if done:
            print(f"corpusprep: resuming: {len(done)} of {len(tasks)} shards were done by an "
                  "earlier run (same input sha256)", file=sys.stderr)  # fmt: skip
        with disk_errors(out.label, _space_needed(scans, tokenizer, itemsize)):
            fresh = executor.map(encode_shard, todo)
            if not hashes:
                hashes = _hashes(files)  # here, while the workers encode and wait on the disk
            if work:  # what the shards' markers were made from, for a resume
                _record_inputs(work, hashes)
            fresh = _progress(fresh, [t.shard for t in todo], "encode", settings.quiet)
            results = [done[t.shard.index] if t.shard.index in done else next(fresh)
                       for t in tasks]  # fmt: skip
            _check_unchanged(before)
            if parts:
                _merge(out, parts, results, itemsize)
        clock.lap("encode")
        counts = {side: sum(getattr(r, f"{side}_tokens") for r in results) for side in SIDES}
        for side in SIDES:
            if counts[side] == 0:
                raise UserError(
                    f"{_name(files)}: split={settings.split} by {split_by} leaves {side} "
                    f"empty ({docs:,} documents); use more documents or another split"
                )
        with disk_errors(out.label, sum(counts.values()) * itemsize):
            produced = exporter.export(
                Streams(out.path_of("train.bin"), out.path_of("val.bin"),
                        out.path_of("train.docs.bin"), out.path_of("val.docs.bin"), dtype,
                        tokenizer.vocab_size, eot_id, str(cfg.get("name"))),
                out,
            )  # fmt: skip
        manifest = _manifest(cfg, overrides, settings, source, tokenizer, executor, files,
                             hashes, shards, scans, results, split_by, split_char, eot, eot_id,
                             dtype, clock)  # fmt: skip
        manifest["format"] = exporter.describe()
        if manifest["format"].get("kind") != "nanogpt":
            manifest.pop("nanogpt_note", None)
        for name in _previous_files(out.out_dir):  # another format or fewer shards before
            if name not in produced:
                out.obsolete(name)
        out.write_pickle("meta.pkl", tokenizer.meta())
        # the writer adds every file's size and sha256, and writes the manifest last
        return out.commit(manifest)


def is_single_text(files: list[InputFile]) -> bool:
    """One plain text, nanoGPT's case: split by position, no end-of-text tokens by default."""
    return len(files) == 1 and files[0].format == "text" and not files[0].doc_separator


def eot_mode(requested: str, single: bool, tokenizer: Tokenizer) -> str:
    if requested == "auto":  # nanoGPT's OpenWebText rule for documents, when there is a token
        return "append" if not single and tokenizer.eot_id is not None else "none"
    if requested != "none" and tokenizer.eot_id is None and not tokenizer.needs_fit:
        raise UserError(
            f"eot={requested}: this tokenizer has no end-of-text token; use eot=none"
            " (or, for tokenizer=hf, name it with tokenizer.eot=...)"
        )
    return requested


def plan(files: list[InputFile], shard_bytes: int, tokenizer: Tokenizer) -> list[Shard]:
    """Cut the files into shards: big files into pieces (where the tokenizer allows a cut;
    after any newline for char and byte), small files packed together, up to shard_bytes."""
    cut = tokenizer.cut_at
    boundary = None if cut == NOWHERE else re.compile(cut or rb"\n")
    shards, run, size = [], [], 0
    for file in files:
        for start, end, nbytes in get_format(file.format).plan(file, shard_bytes, boundary):
            if run and size + nbytes > shard_bytes:
                shards.append(Shard(len(shards), tuple(run)))
                run, size = [], 0
            run.append(Segment(file, start, end, nbytes, cut))  # cut: bounds what is held
            size += nbytes
    if run:
        shards.append(Shard(len(shards), tuple(run)))
    return shards


def _encode_tasks(shards, scans, settings, split_by, split_char, eot, eot_id, tokenizer, dtype,
                  hashes, single, out: OutputWriter, run_key, executor):  # fmt: skip
    """Where each shard writes. For one text split by position, when the token count
    follows from the character count (char tokenizer) and the workers share this machine,
    shards write straight into train.bin / val.bin at known places. Otherwise each writes
    part files of its own (plus where documents start, unless one text) and a completion
    marker, in a work folder a re-run can resume from; parts are merged in plan order."""
    itemsize = np.dtype(dtype).itemsize
    firsts = np.cumsum([0] + [s.chars for s in scans[:-1]]).tolist()
    first_docs = np.cumsum([0] + [s.docs for s in scans[:-1]]).tolist()
    sides = [_side_chars(f, s.chars, split_char) for f, s in zip(firsts, scans)]
    counts = [(tokenizer.tokens_for(t), tokenizer.tokens_for(v)) for t, v in sides]
    known = all(t is not None and v is not None for t, v in counts)
    in_place = executor.shared_files and single and split_by == "position" and eot == "none"
    in_place = in_place and known
    work = None if in_place else out.work(run_key)
    if work is not None:
        executor.attach(work)
    if in_place:
        totals = [sum(c[k] for c in counts) for k in (0, 1)]
        check_free_space(out.out_dir, sum(totals) * itemsize)
        paths = [out.temp(f"{side}.bin", totals[k] * itemsize) for k, side in enumerate(SIDES)]
        position = [0, 0]
    doc_keys = {name: digest[:16] for name, digest in hashes.items()}
    tasks, parts = [], []
    for shard, first, first_doc, chars, count in zip(shards, firsts, first_docs, sides, counts):
        targets, index = [], [None, None]
        for k, side in enumerate(SIDES):
            if in_place:
                targets.append(Target(str(paths[k]), position[k]) if chars[k] else None)
                position[k] += count[k] or 0
                continue
            part = work / f"{side}.{shard.index:06d}.part"
            targets.append(Target(str(part), fresh=True))
            if not single:
                index[k] = str(work / f"{side}.{shard.index:06d}.docs")
            parts.append((shard.index, side, part, index[k]))
        keys = {
            s.file.name: doc_keys[s.file.name] for s in shard.segments if s.file.name in doc_keys
        }
        marker = None if work is None else str(work / f"{shard.index:06d}.done")
        tasks.append(EncodeTask(shard, tokenizer, dtype, settings.split, split_by, split_char,
                                first, first_doc, settings.seed, keys, eot, eot_id,
                                targets[0], targets[1], index[0], index[1], marker))  # fmt: skip
    return tasks, parts


def _side_chars(first: int, chars: int, split_char: int) -> tuple[int, int]:
    """How many of a shard's characters fall on the train side and on the val side."""
    train = min(max(split_char - first, 0), chars)
    return train, chars - train


def _merge(out: OutputWriter, parts, results: list[EncodeResult], itemsize: int) -> None:
    """Concatenate the shards' parts into train.bin / val.bin in plan order (never finish
    order); document starts are shifted by the tokens of the shards before."""
    totals = {side: sum(getattr(r, f"{side}_tokens") for r in results) for side in SIDES}
    check_free_space(out.out_dir, sum(totals.values()) * itemsize)
    for side in SIDES:
        total = totals[side]
        mine = [(i, part, index) for i, s, part, index in sorted(parts) if s == side]
        with open(out.temp(f"{side}.bin"), "r+b") as dst:
            for _, part, _ in mine:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
            if dst.tell() != total * itemsize:
                raise RuntimeError(f"{side}.bin: merged {dst.tell()} bytes, not {total * itemsize}")
        if mine and mine[0][2] is not None:
            with open(out.temp(f"{side}.docs.bin"), "r+b") as dst:
                base = 0
                for (_, _, index), result in zip(mine, results):
                    (np.fromfile(index, dtype=np.uint64) + np.uint64(base)).tofile(dst)
                    base += getattr(result, f"{side}_tokens")


def _hashes(files: list[InputFile]) -> dict[str, bytes]:
    """sha256 of every input file (a zip member: of its archive, plus its name)."""
    digests: dict[str, bytes] = {}
    for file in files:
        if file.path not in digests:
            digests[file.path] = bytes.fromhex(sha256_file(Path(file.path)))
    # by name for documents (a zip member's own key), by path for the files on disk
    return {**digests, **{f.name: _member_digest(digests[f.path], f.member) for f in files}}


def input_sha256(files: list[InputFile], hashes: dict[str, bytes]) -> str:
    """The sha256 of the input: of the file itself when there is one, else a digest of
    every file's name and sha256."""
    if len(files) == 1 and files[0].member is None:
        return hashes[files[0].name].hex()
    lines = "".join(f"{f.name}\t{hashes[f.name].hex()}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


# keys that change where or how fast a run goes, never what it writes
NOT_IN_FINGERPRINT = {"out_dir", "quiet", "force", "dry_run", "executor", "shard_bytes", "name"}
SOURCE_NOT_IN_FINGERPRINT = {"cache_dir", "timeout", "retries", "name", "deadline",
                             "max_bytes", "max_uncut_bytes"}  # fmt: skip


def fingerprint(cfg: DictConfig, tokenizer: Tokenizer, input_digest: str) -> str:
    """What the outputs depend on: the input bytes, the resolved settings that shape the
    output, corpusprep's version and the tokenizer's (its library version, its files)."""
    settings = OmegaConf.to_container(cfg, resolve=True)
    settings = {k: v for k, v in settings.items() if k not in NOT_IN_FINGERPRINT}
    settings["source"] = {k: v for k, v in settings.get("source", {}).items()
                          if k not in SOURCE_NOT_IN_FINGERPRINT}  # fmt: skip
    data = {"input": input_digest, "settings": settings, "corpusprep": corpusprep.__version__,
            "tokenizer": {} if tokenizer.needs_fit else tokenizer.describe()}  # fmt: skip
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _read_manifest(folder: Path) -> Optional[dict[str, Any]]:
    """The manifest.json an earlier run left in `folder`, if it is there and readable."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (
        manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None
    )


def finished_manifest(out_dir: str) -> Optional[dict[str, Any]]:
    """The manifest of a finished run in out_dir, if its outputs are all there and whole."""
    folder = Path(out_dir)
    manifest = _read_manifest(folder)
    if manifest is None or "meta.pkl" not in manifest["files"]:
        return None
    # a skipped run must be right: every file's size, then its bytes (1-2 GB/s); a folder
    # without checksums is from an older version: redo it
    whole = changed_files(folder, manifest) == []
    return manifest if whole else None


INPUTS = "inputs.json"  # in a work folder: the sha256 of the input its shards come from


def _input_digests(hashes: dict[str, bytes]) -> dict[str, str]:
    return {name: digest.hex() for name, digest in sorted(hashes.items())}


def _record_inputs(work: Path, hashes: dict[str, bytes]) -> None:
    tmp = work / f".{INPUTS}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(_input_digests(hashes)), encoding="utf-8")
    os.replace(tmp, work / INPUTS)


def _recorded_inputs(work: Path) -> Optional[dict[str, str]]:
    try:
        return json.loads((work / INPUTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _space_needed(scans, tokenizer: Tokenizer, itemsize: int) -> int:
    """About how many bytes the run writes: its ids twice (shard parts, then merged), with
    one token per character for char/byte and about four characters per token for BPE."""
    chars = sum(s.chars for s in scans)
    tokens = chars if tokenizer.tokens_for(1) is not None else chars // 4
    return 2 * tokens * itemsize


def plan_digest(shards: list[Shard]) -> str:
    """A digest of the shard plan: which units of which files each shard covers."""
    text = "\n".join(
        f"{shard.index}:" + ";".join(f"{s.file.name}@{s.start}-{s.end}" for s in shard.segments)
        for shard in shards
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _stat_digest(stats: dict[str, os.stat_result]) -> str:
    """Cheap stand-in for the input's hash when naming a work folder: paths, sizes, times."""
    seen = sorted((path, st.st_size, st.st_mtime_ns) for path, st in stats.items())
    return hashlib.sha256(repr(seen).encode()).hexdigest()


def _previous_files(folder: Path) -> list[str]:
    """The output files a finished earlier run in `folder` listed in its manifest."""
    manifest = _read_manifest(folder)
    return list(manifest["files"]) if manifest else []


def _member_digest(digest: bytes, member: Optional[str]) -> bytes:
    return digest if member is None else hashlib.sha256(digest + member.encode()).digest()


def _check_unchanged(before: dict[str, os.stat_result]) -> None:
    for path, stat in before.items():
        after = os.stat(path)
        if (after.st_size, after.st_mtime_ns) != (stat.st_size, stat.st_mtime_ns):
            raise UserError(f"{path}: the file changed while it was being read; run again")


def _name(files: list[InputFile]) -> str:
    return files[0].name if len(files) == 1 else f"{len(files)} files ({files[0].name}, ...)"


def _progress(results: Iterable, shards: list[Shard], what: str, quiet: bool) -> Iterator:
    """On a terminal, a bar in bytes of input (MB/s, ETA) with documents/s and tokens/s;
    nothing otherwise (not even tqdm's import)."""
    if quiet or not sys.stderr.isatty():
        yield from results
        return
    from tqdm import tqdm

    docs = tokens = 0
    with tqdm(total=sum(s.nbytes for s in shards), unit="B", unit_scale=True, desc=what,
              leave=False, dynamic_ncols=True) as bar:  # fmt: skip
        for count, (shard, result) in enumerate(zip(shards, results), 1):
            docs += result.docs  # scan and encode results both count documents
            tokens += getattr(result, "tokens", 0)  # only encode results count tokens
            bar.update(shard.nbytes)
            elapsed = max(bar.format_dict["elapsed"], 1e-9)
            rates = f"{count}/{len(shards)} shards, {docs / elapsed:,.0f} docs/s" + (
                f", {tokens / elapsed:,.0f} tok/s" if tokens else "")  # fmt: skip
            bar.set_postfix_str(rates, refresh=False)
            yield result


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 4)
        self.last = now

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 4)


def _manifest(cfg, overrides, settings: Settings, source, tokenizer, executor, files, hashes,
              shards, scans, results, split_by, split_char, eot, eot_id, dtype, clock):  # fmt: skip
    import hydra

    from corpusprep.redact import redact_values

    train = sum(r.train_tokens for r in results)
    val = sum(r.val_tokens for r in results)
    chars = sum(s.chars for s in scans)
    listed = [
        {"path": str(Path(f.path).resolve()), **({"member": f.member} if f.member else {}),
         "format": f.format, "compression": f.compression, "bytes": os.path.getsize(f.path),
         "sha256": hashes[f.path].hex()}  # of the file on disk (a zip: the archive)
        for f in files
    ]  # fmt: skip
    sha256 = input_sha256(files, hashes)
    train_keys = np.concatenate([r.train_keys for r in results])
    val_keys = np.concatenate([r.val_keys for r in results])
    manifest: dict[str, Any] = {
        "corpusprep": corpusprep.__version__,
        "fingerprint": fingerprint(cfg, tokenizer, sha256),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "name": cfg.get("name"),
        "source": redact_values(
            {  # a URL's user:password or ?token= is never written
                **source.describe(),
                "file": listed[0]["path"],
                "bytes": sum(os.path.getsize(p) for p in {f.path for f in files}),
                "sha256": sha256,
                "files": listed,
            }
        ),  # fmt: skip
        "tokenizer": tokenizer.describe(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype,
        "split": {
            "by": split_by,
            "fraction": settings.split,
            **(
                {"seed": settings.seed}
                if split_by == "document"
                else {"train_chars": split_char, "val_chars": chars - split_char}
            ),
        },  # fmt: skip
        "eot": {"mode": eot, "id": eot_id},
        "chars": chars,
        "documents": {
            "total": sum(s.docs for s in scans),
            "train": sum(r.train_docs for r in results),
            "val": sum(r.val_docs for r in results),
            "skipped_invalid": sum(s.skipped for s in scans),
            "exact_duplicates_across_splits": int(np.isin(val_keys, train_keys).sum()),
        },
        "tokens": {"train": train, "val": val},
        "chars_per_token": round(chars / (train + val), 4),
        "shards": {
            "count": len(shards),
            "shard_bytes": settings.shard_bytes,
            "plan_sha256": plan_digest(shards),
        },  # fmt: skip
        "executor": executor.describe(),
        "seconds": {**clock.laps, "total": clock.total()},
        "config": redact_values(OmegaConf.to_container(cfg, resolve=True)),
        "overrides": redact_values(list(overrides or [])),
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "hydra": hydra.__version__,
        },  # fmt: skip
    }
    if split_by == "position":
        manifest["documents"].pop("exact_duplicates_across_splits")
    if dtype != "uint16":
        manifest["nanogpt_note"] = (
            f"ids are {dtype}; nanoGPT's stock train.py reads uint16: change "
            f"np.memmap(..., dtype=np.uint16, ...) in get_batch to dtype=np.{dtype}"
        )
    return manifest

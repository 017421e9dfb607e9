"""The driver: wires source -> formats -> shards -> tokenizer -> split -> executor -> writer.

1. the source gives its input files (a URL is downloaded into the cache once);
2. they are cut into a fixed plan of shards: pieces of big files (where the tokenizer
   allows a cut) and runs of small files; the plan never depends on the workers;
3. scan pass, in parallel, only when something must be known before encoding (a
   tokenizer that learns its characters, the character where nanoGPT's split falls, the
   documents' numbers for a hash split): count characters and documents, collect the
   distinct characters, check JSON and fields (a plain text's UTF-8: when encoded);
4. fit the tokenizer if it learns from the corpus (char), pick the dtype, and find the
   split point: nanoGPT's first int(n*split) characters;
5. encode pass, in parallel: every shard encodes its documents and writes its ids (for
   documents, one stream; the first pass over the input when there was no scan);
6. choose the val documents from the count (train_test_split's seeded permutation), merge
   the shards' parts in plan order, each document to its side, write meta.pkl and
   manifest.json, and rename everything into place together.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Optional, TypeVar

import numpy as np
from omegaconf import DictConfig, OmegaConf

import corpusprep
from corpusprep.config import Settings, build, overridden_keys, read_settings
from corpusprep.errors import UserError, changed_while_read, escape_controls
from corpusprep.executors import Executor
from corpusprep.executors.local import LocalExecutor, available_cores
from corpusprep.exporters import DOC_INDEX, Exporter, Streams
from corpusprep.formats import STREAM_END, InputFile, Segment, get_format, let_go_of_readers
from corpusprep.merge import Merged, PartFile, merge
from corpusprep.progress import Bar, Clock, shown
from corpusprep.sample import Merger, Sample
from corpusprep.shards import (
    SIDES,
    EncodeResult,
    EncodeTask,
    Rules,
    ScanResult,
    ScanRun,
    Shard,
    ShardRun,
    Target,
    count_characters,
    encode_run,
    finished,
    scan_run,
    scan_shard,
)
from corpusprep.sources import Source
from corpusprep.split import permutation, split_point, val_document_count, val_documents
from corpusprep.tokenizers import NOWHERE, Tokenizer
from corpusprep.tokenizers.tiktoken import ONE_BYTE_CUTS
from corpusprep.writer import (
    MANIFEST,
    WORK,
    GrowingDigest,
    Identity,
    OutputWriter,
    changed_files,
    check_free_space,
    choose_dtype,
    disk_errors,
    file_identity,
    file_sha256,
    in_threads,
)

TOKEN_BYTES = "token_bytes.npy"  # int32, one per id: its UTF-8 bytes (0: special)
BLOCK_SIZE = 1024  # nanoGPT's default block_size: a side shorter than a few blocks is warned
FEW_BLOCKS = 4
# a plan of more shards than this, from a shard_bytes under the automatic floor (1 MiB), is
# warned: each shard costs about a millisecond of its own (shard_bytes=10 made 30,000 shards
# of tiny shakespeare: 31 s, not 0.08 s). Small values stay allowed: the tests use them to
# prove the output does not depend on the shards
MANY_SHARDS = 4096


@dataclass
class Run:
    """One run: what every stage reads, and what each stage adds for the ones after it."""

    cfg: DictConfig
    overrides: list[str]
    settings: Settings
    source: Source
    tokenizer: Tokenizer
    executor: Executor
    exporter: Exporter
    out: OutputWriter
    clock: _Clock
    dtype: Optional[str] = None
    learns: bool = False  # the tokenizer learns its vocabulary from this input
    in_place: bool = False  # shards write their ids where they end up (no parts to merge)
    files: list[InputFile] = field(default_factory=list)
    hashes: dict[str, bytes] = field(default_factory=dict)  # sha256 of every input file
    before: dict[str, Identity] = field(default_factory=dict)  # each input as first seen
    single: bool = False  # one plain text (nanoGPT's case)
    split_by: str = "position"
    eot: str = "none"
    eot_id: Optional[int] = None
    shards: list[Shard] = field(default_factory=list)
    read_whole: set[str] = field(default_factory=set)  # small text files, hashed as read
    run_key: str = ""  # names the resumable work folder
    scans: list[ScanResult] = field(default_factory=list)  # empty: no scan pass was needed
    sample: Optional[Sample] = None  # what a tokenizer that trains is fitted on
    chars: int = 0  # what the input holds (counted by the scan, or else by the encode pass)
    docs: int = 0
    skipped: int = 0
    split_char: int = 0  # split_by=position: characters before this go to train
    val_docs: Optional[np.ndarray] = None  # split_by=document: which documents go to val
    order: Optional[dict[str, np.ndarray]] = None  # order=shuffle: each side's new order
    results: list[EncodeResult] = field(default_factory=list)
    parts: list[PartFile] = field(default_factory=list)
    merged: Optional[Merged] = None
    stats: dict[str, Any] = field(default_factory=dict)  # val bytes, ids used (measure)
    token_bytes: Optional[np.ndarray] = None
    produced: dict[str, int] = field(default_factory=dict)
    replacing: Optional[str] = None  # said when the commit replaces another run's files

    @property
    def name(self) -> str:
        return corpus_name(self.files, self.source)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def cores(self) -> int:
        """The cores this run takes on this machine, where the input files are hashed: a
        local executor's workers (executor.workers=1: one), else all of them."""
        if isinstance(self.executor, LocalExecutor):
            return min(self.executor.workers, available_cores())
        return available_cores()


def prepare(cfg: DictConfig, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the whole job described by a composed config; returns the manifest."""
    settings = read_settings(cfg)
    source: Source = build(cfg.source, "source")
    tokenizer: Tokenizer = build(cfg.tokenizer, "tokenizer")
    executor: Executor = build(cfg.executor, "executor")
    exporter: Exporter = build(cfg.format, "format")
    exporter.check(str(cfg.get("name")))  # a name its files cannot carry: before any work
    # a tokenizer that does not learn knows its ids now: a too-small dtype fails before any work
    dtype = (
        None
        if tokenizer.needs_fit
        else choose_dtype(settings.dtype, tokenizer.max_id, exporter.wide_from)
    )
    # the lock first: another run in this out_dir waits for nothing and mixes nothing; the
    # up-to-date check reads a folder no one is writing (or no one can: a read-only disk).
    # Engines on other machines need the work folder (in out_dir) from the start; a user
    # error still leaves nothing behind.
    with OutputWriter(settings.out_dir) as out:
        run = Run(cfg, list(overrides or []), settings, source, tokenizer, executor, exporter,
                  out, _Clock(), dtype, tokenizer.needs_fit)  # fmt: skip
        previous = read_inputs(run)
        if previous is not None:
            return previous
        out.check_writable()  # a read-only out_dir: fine only if it was up to date
        with kept_in_place(run):
            plan_shards(run)
            if not tokenizer.needs_fit:  # before the first fork: workers share what it builds
                tokenizer.load()
            # the executor inside the writer: on any failure its workers stop before the
            # writer removes the work folder they write into
            with executor:
                scan(run)
                decide(run)
                encode(run)
                choose_sides(run)
                merge_parts(run)
                measure(run)
                export(run)
            return commit(run)


def read_inputs(run: Run) -> Optional[dict[str, Any]]:
    """The input files (a download first); the previous manifest if out_dir is up to date."""
    made = _read_manifest(Path(run.settings.out_dir))  # an earlier run's (read once)
    run.files = _without_outputs(run.source.files(progress=not run.settings.quiet),
                                 run.settings.out_dir, made)  # fmt: skip
    check_inputs(run.files, run.source, run.overrides, run.settings.out_dir)
    run.clock.lap("source")
    # what every input is before anything reads it (as the listing found it, if it looked):
    # a change from here on fails the run. (A plugin's source may never have run
    # Source.__init__, which sets it.)
    listed = getattr(run.source, "listed", None) or {}
    run.before = {f.path: listed.get(f.path) or file_identity(os.stat(f.path)) for f in run.files}
    for f in run.files:  # its size when listed is what is read (a small file's reader
        # hashes those bytes for the manifest): grown or cut since, it changed
        if f.member is None and run.before[f.path].size != f.size:
            raise changed_while_read(f.path)
    previous = None if run.settings.force else finished_manifest(run.settings.out_dir, run, made)
    if previous is not None:  # a finished run is there: redo it only if something changed
        digest = input_sha256(run.files, run.hashes)
        if previous.get("fingerprint") == fingerprint(run, digest, _max_id(run, previous)):
            run.executor.leaving(Path(run.settings.out_dir) / WORK)  # (a dead run's jobs)
            run.out.remove_stale_work()  # of a run killed after its commit, or superseded
            return {**previous, "skipped": True}
    if previous is not None:  # its input or settings differ: said when it is replaced
        run.replacing = replacing(run, previous, digest)
    elif run.settings.force and made:
        run.replacing = replacing(run, made, None)  # force: the input not hashed yet
    return None


def check_inputs(files: list[InputFile], source: Source, overrides: list[str],
                 out_dir: Optional[str] = None) -> None:  # fmt: skip
    """The listed inputs make sense for the run (before anything reads them; dry_run too):
    no other run's output folder among them (`out_dir`: this run's, whose own files were
    left out), no read option given that they cannot use."""
    _refuse_other_outputs(files, getattr(source, "patterns", None), getattr(source, "exclude", []),
                          out_dir)  # fmt: skip
    _check_read_options(files, getattr(source, "options", None), overrides)


def _check_read_options(files: list[InputFile], options: Any, overrides: list[str]) -> None:
    """A read option the command line sets that no input file's format uses does nothing
    (as val_size with a split by position): a text_field for plain text, a document
    separator or end for JSON Lines or Parquet. Refused, as the user meant something by it.
    A preset's own (tinystories' separator) stays for another source's documents."""
    if options is None:  # a plugin's source that keeps none
        return
    given = overridden_keys(overrides)
    formats = sorted({f.format for f in files})
    what = f"the input is {' and '.join(formats)}; drop it (or set source.format)"
    if ("source.text_field" in given and options.text_field != "text"
            and not {"jsonl", "parquet"} & set(formats)):  # fmt: skip
        raise UserError(
            f"source.text_field={options.text_field}: does nothing here (it names the field "
            f"of JSON Lines and Parquet documents that holds their text), and {what}"
        )
    for key in ("doc_separator", "doc_end"):
        value = getattr(options, key)
        if f"source.{key}" in given and value is not None and "text" not in formats:
            raise UserError(
                f"source.{key}={value!r}: does nothing here (it cuts plain text into "
                f"documents), and {what}"
            )


MAX_EXCLUDED = 20  # output folders the advice lists (as for odd files: sources.files)


def _refuse_other_outputs(files: list[InputFile], patterns: Optional[list[str]],
                          excluded: list[str], own: Optional[str]) -> None:  # fmt: skip
    """A glob over a folder that holds another run's out_dir read its files as text: its
    ids failed as invalid UTF-8, then (skipped) its manifest.json as JSON, neither saying
    what it was. One line names the folder (as the patterns give it: relative to here
    unless one is absolute) and the source.exclude that leaves it out: its absolute path,
    glob characters escaped ([ in a name), quoted for Hydra and the shell, beside the
    exclusions given."""
    from glob import escape

    from corpusprep.sources.files import exclude_override, printable

    # a folder with a manifest.json beside a listed file (llm.c's, build-nanogpt's and
    # Megatron's files are named after the run), or above it (doc_index/)
    listed = {os.path.dirname(f.path) for f in files if f.member is None}
    found = {d for d in listed if os.path.isfile(os.path.join(d, MANIFEST))}
    found |= {os.path.dirname(d) for d in listed if os.path.basename(d) == DOC_INDEX
              and os.path.isfile(os.path.join(os.path.dirname(d), MANIFEST))}  # fmt: skip
    if own is not None:  # a file of the user's in this run's out_dir is read
        own = os.path.realpath(own)
        found = {d for d in found if os.path.realpath(d) != own}
    # each one's manifest: bounded JSON (the folder may be anyone's), and one of ours
    ours = [f for f in sorted(found) if "corpusprep" in (_read_manifest(Path(f)) or {})]
    if not ours:
        return
    relative = patterns and not any(os.path.isabs(os.path.expanduser(p)) for p in patterns)
    shown = printable(os.path.relpath(ours[0]) if relative else ours[0])
    # all of them at once, else each paste meets the next; absolute: matches however the
    # glob gave it
    leave_out = [*excluded, *(escape(f) + "/*" for f in ours)]
    if len(ours) == 1:
        raise UserError(
            f"{shown}: a corpusprep output folder (its manifest.json) is among the input "
            f"files; leave it out with {exclude_override(leave_out)} (or move it)"
        )
    fix = (f"leave them out with {exclude_override(leave_out)}" if len(ours) <= MAX_EXCLUDED
           else "leave them out with a source.exclude pattern that matches them")  # fmt: skip
    raise UserError(
        f"{shown} and {len(ours) - 1} other corpusprep output folders (each with its "
        f"manifest.json) are among the input files; {fix} (or move them)"
    )


def _without_outputs(files: list[InputFile], out_dir: str,
                     manifest: Optional[dict[str, Any]]) -> list[InputFile]:  # fmt: skip
    """The input files less the ones out_dir's last run wrote (its `manifest` and the
    files it lists): a glob over the folder that holds out_dir read them as input, and a
    re-run failed on manifest.json or was never up to date. Only files inside out_dir
    count (a manifest is a stranger's as much as the folder)."""
    if manifest is None:
        return files
    folder = os.path.realpath(out_dir)
    ours = {os.path.realpath(os.path.join(folder, name))
            for name in [*manifest["files"], "manifest.json"] if isinstance(name, str)}  # fmt: skip
    ours = {p for p in ours if p.startswith(folder + os.sep)}
    names = {os.path.basename(p) for p in ours}  # most files need no realpath
    left = {f.path for f in files if os.path.basename(f.path) in names
            and os.path.realpath(f.path) in ours}  # fmt: skip
    if not left:
        return files
    if len(left) == len({f.path for f in files}):
        raise UserError(
            f"{min(left)}: a file corpusprep wrote in out_dir={out_dir} (its manifest lists "
            "it), not a corpus; read other files, or write to another out_dir"
        )
    shown = ", ".join(os.path.relpath(p, folder) for p in sorted(left)[:3])
    shown += ", ..." if len(left) > 3 else ""
    print(escape_controls(f"corpusprep: note: left out {len(left)} file{'s' * (len(left) > 1)} "
                          f"in out_dir={out_dir} that its last run wrote ({shown}): never read "
                          "as input"), file=sys.stderr)  # fmt: skip
    return [f for f in files if f.path not in left]


def replacing(run: Run, made: dict[str, Any], input_digest: Optional[str]) -> Optional[str]:
    """The line said when a run replaces an out_dir made with other settings (a preset's
    data/NAME re-run with tokenizer=byte): what differs, and an out_dir that keeps both.
    Said at the commit: a run that fails replaces nothing (and its error stays one line).
    `input_digest`: the input's sha256, None where not taken (force=true)."""
    from corpusprep.overrides import choice_name

    max_id = _max_id(run, made)
    was = _flat(as_auto(made.get("config") or {}, run, max_id))
    now = _flat(as_auto(_redacted_config(run.cfg), run, max_id))
    given = _flat(OmegaConf.to_container(run.cfg, resolve=False))  # interpolations unresolved
    changed, suffix, regrouped = [], [], set()
    for group in ("source", "tokenizer", "format"):  # another class: named by its choice
        if was.get(f"{group}._target_") != now.get(f"{group}._target_"):
            changed.append(f"{group}={made.get(group, {}).get('kind')}")
            suffix.append(choice_name(group, run.cfg[group]))
            regrouped.add(group)

    def differs(key: str) -> bool:
        return was.get(key) != now.get(key)

    for key in sorted(set(was) | set(now)):
        group, leaf = key.split(".")[0], key.split(".")[-1]
        if group in NOT_IN_FINGERPRINT | regrouped or leaf in SOURCE_NOT_IN_FINGERPRINT:
            continue
        if key == "shard_tokens" and "format" in regrouped:  # the format's own default
            continue
        if given.get(key) == f"${{{leaf}}}" and differs(leaf):
            continue  # format.shard_tokens: ${shard_tokens}: said once, by the key set
        if differs(key):
            changed.append(f"{key}={_shown(was.get(key))}")
            suffix.append(_slug_part(leaf, now.get(key)))
    if not changed and input_digest is None:
        return None
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        what = f"made with {', '.join(changed[:3])}{more}"
    else:
        what, suffix = _made_otherwise(run, made, input_digest), ["new"]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(suffix[:2]))
    keep = _unused(f"{run.settings.out_dir.rstrip('/')}-{slug}")
    return f"corpusprep: replacing {run.settings.out_dir}, {what}; out_dir={keep} keeps both"


def _made_otherwise(run: Run, made: dict[str, Any], input_digest: str) -> str:
    """What, other than the settings, made the earlier outputs: other input, other files
    or library of the tokenizer (a ranks file edited, a reused folder prepared again), or
    another corpusprep."""
    was = str(made.get("source", {}).get("sha256"))
    if was != input_digest:
        return f"made from other input (sha256 {was[:12]}...)"
    described = made.get("tokenizer") if isinstance(made.get("tokenizer"), dict) else {}
    same_ids = getattr(run.tokenizer, "FINGERPRINT_AS", {})
    now = run.tokenizer.identity()
    keys = [k for k in now if k in described and k not in same_ids and described[k] != now[k]]
    if keys:
        shown = [f"tokenizer.{k}={_short(_shown(described[k]))}" for k in keys[:3]]
        return f"made with {', '.join(shown)}{' and more' if len(keys) > 3 else ''}"
    if made.get("corpusprep") != corpusprep.__version__:
        return f"made by corpusprep {_shown(made.get('corpusprep'))}"
    return "made otherwise (its fingerprint differs)"


def _short(text: str) -> str:
    """A value for one line: a sha256 by its first 12 digits, anything long cut at 40."""
    if re.fullmatch(r"[0-9a-f]{64}", text):
        return text[:12] + "..."
    return text if len(text) <= 40 else text[:37] + "..."


def _unused(folder: str) -> str:
    """`folder`, or folder-2, -3, ...: the first that does not exist, so that following
    the advice never replaces what an earlier piece of advice kept."""
    for n in range(1, 1000):
        name = folder if n == 1 else f"{folder}-{n}"
        if not os.path.lexists(name):
            return name
    return f"{folder}-{os.getpid()}"


def _slug_part(leaf: str, value: Any) -> str:
    """A changed setting in a folder name: split0.8; a path, URL or glob by the last name in
    it that is not a wildcard, without its extension (my.txt: my; lib/*.txt: lib)."""
    if leaf not in ("path", "url", "glob"):
        return f"{leaf}{_shown(value)}"
    first = value[0] if isinstance(value, list) and value else value
    stems = [PurePosixPath(name).stem.strip("*?[]") for name in str(first).split("/")]
    named = [stem for stem in stems if re.search(r"[A-Za-z0-9]", stem)]
    return named[-1] if named else leaf


def _shown(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _redacted_config(cfg: DictConfig) -> dict[str, Any]:
    from corpusprep.redact import redact_values

    return redact_values(OmegaConf.to_container(cfg, resolve=True))  # as the manifest has it


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def plan_shards(run: Run) -> None:
    """How the text is read: split rule, end-of-text tokens, and the fixed shard plan."""
    settings = run.settings
    # one text, nanoGPT's case: split by position and no end-of-text tokens, unless asked
    run.single = is_single_text(run.files)
    run.split_by = split_rule(settings, run.single, run.name)
    run.eot = eot_mode(settings.eot, run.single, run.tokenizer)
    run.shards = plan(run.files, settings.shard_bytes, run.tokenizer)
    run.read_whole = _read_whole(run.shards)
    if len(run.shards) > MANY_SHARDS and settings.shard_bytes < 1 << 20:
        print(f"corpusprep: warning: shard_bytes={settings.shard_bytes} cuts the input into "
              f"{len(run.shards):,} shards, each with a cost of its own; shard_bytes counts "
              "bytes, and its default, 8388608 (8 MiB, less for a small corpus), suits any "
              "corpus", file=sys.stderr)  # fmt: skip
    stats = _stat_digest(run.before) + plan_digest(run.shards)
    run.run_key = fingerprint(run, stats, None if run.learns else run.tokenizer.max_id)[:20]
    if not run.executor.shared_files:
        run.executor.attach(run.out.work(run.run_key))


DEFAULT_SPLIT = 0.9  # conf/config.yaml's: a split given otherwise was asked for


def split_rule(settings: Settings, single: bool, name: str) -> str:
    """The split_by a run uses (auto: by position for one text, else by document), or a
    UserError for settings that rule cannot honour; the dry run asks the same."""
    split_by = settings.split_by if settings.split_by != "auto" else (
        "position" if single else "document")  # fmt: skip
    if split_by in ("document", "hash") and single:
        raise UserError(
            f"split_by={split_by}: {name} is one text, not documents; use "
            "split_by=position (or head/tail), or source.doc_separator to cut it into documents"
        )
    if settings.val_size is not None and split_by in ("position", "hash"):
        rule = "splits one text by position" if split_by == "position" else "hashes"
        raise UserError(
            f"val_size={settings.val_size}: does nothing with split_by={split_by} (it "
            f"{rule}, by split={settings.split}); drop val_size (val_size=null, where a preset "
            "sets it), or use split_by=document "
            "(or head/tail for tokens)"
        )
    sized = split_by in ("head", "tail") or (split_by == "document" and settings.val_size)
    if settings.split != DEFAULT_SPLIT and sized:  # val_size alone sizes val: split is unread
        fix = ("val_size=null to split by it" if split_by == "document" else
               "split_by=position val_size=null to split by it")  # fmt: skip
        raise UserError(
            f"split={settings.split}: does nothing with split_by={split_by} and val_size="
            f"{settings.val_size} (val_size alone sizes val); drop split, or set {fix}"
        )
    if settings.order == "shuffle" and single:
        raise UserError(
            f"order=shuffle: {name} is one text, not documents; use order=source, or "
            "source.doc_separator to cut it into documents"
        )
    if settings.order == "shuffle" and split_by in ("hash", "position"):
        why = ("picks each document's side on its own, with no permutation to order by"
               if split_by == "hash" else "cuts the text at one character, through a "
               "document")  # fmt: skip
        raise UserError(
            f"order=shuffle: needs split_by=document (or head/tail); split_by={split_by} {why}"
        )
    return split_by


def needs_scan(run: Run) -> bool:
    """Whether encoding needs a count first: the characters a tokenizer learns, the
    character where nanoGPT's split falls, or every document's number (split_by=hash).
    Documents split by document (or head/tail) are encoded in one pass."""
    return run.tokenizer.needs_fit or run.split_by in ("position", "hash")


def scan(run: Run) -> None:
    """The read pass: characters, documents and the character set; JSON and fields checked
    (a plain text's UTF-8 is checked by the encode pass)."""
    if not needs_scan(run):
        return
    shards, quiet = run.shards, run.settings.quiet
    rule = run.tokenizer.sample_rule(run.single)  # a tokenizer that trains: its sample
    # one plain text for BPE: its characters counted from its bytes, without decoding
    count = count_characters if _countable(run) else partial(scan_shard, rule=rule)
    # consecutive pieces of a file in runs, as the encode pass takes them: a worker of
    # many that took every other piece decompressed the whole file to skip to its own
    runs = _in_runs(shards, run.executor.parallelism(), _itself)
    scanned = run.executor.map(scan_run, [ScanRun(each, count) for each in runs])
    # the scan reads the whole text too: stopped there by a file's cap, not only by the
    # encode pass after it (each shard under the cap, it read any multiple of it)
    scans = _within_max_bytes((r for results in scanned for r in results), run.files, [])
    scans = _progress(scans, shards, "scan", quiet)
    try:
        if rule is not None:  # merged as they come: memory holds about one sample
            merger = Merger(rule.chars)
            for result in scans:
                merger.add(result.sample)
                run.scans.append(replace(result, sample=None))
            run.sample = merger.result()
        else:
            run.scans = list(scans)
    finally:
        let_go_of_readers()  # what this process kept open reading shards itself (one worker)
    run.clock.lap("scan")
    _take_counts(run, run.scans)


def _countable(run: Run) -> bool:
    """One uncompressed text split by position, for a tokenizer that learns nothing: the
    split point needs only its character count, which its bytes give at GB/s without
    decoding (the encode pass checks the UTF-8, with the scan's messages). With
    source.skip_invalid the scan still decides whether the text is left out."""
    file = run.files[0]
    return (run.single and run.split_by == "position" and not run.tokenizer.needs_fit
            and file.seekable and not file.skip_invalid)  # fmt: skip


def _take_counts(run: Run, counts: list) -> None:
    """The input's characters and documents, from the scan's or the encode pass's results."""
    run.chars = sum(c.chars for c in counts)
    run.docs = sum(c.docs for c in counts)
    run.skipped = sum(c.skipped for c in counts)
    if run.docs == 0:
        raise UserError(f"{run.name}: no documents to tokenize (all empty or skipped)")


def decide(run: Run) -> None:
    """Fit the tokenizer, pick the dtype, and find nanoGPT's split point."""
    settings, scans = run.settings, run.scans
    if run.split_by == "position":
        run.split_char = split_point(run.chars, settings.split, run.name)
    if run.tokenizer.needs_fit:
        charset = "".join(sorted(set("".join(s.charset for s in scans))))
        eot = run.eot != "none"
        if run.sample is not None:  # a tokenizer that trains: on the scan's sample
            note = f"{run.sample.chars:,} characters in {len(run.sample):,} pieces"
            with Clock("train tokenizer", shown(settings.quiet), note):
                run.tokenizer.fit(charset, eot=eot, sample=run.sample)
            run.sample = None  # its memory back before encoding
            run.clock.lap("train")
        else:
            run.tokenizer.fit(charset, eot=eot)
    run.eot_id = run.tokenizer.eot_id if run.eot != "none" else None
    run.dtype = run.dtype or choose_dtype(
        settings.dtype, run.tokenizer.max_id, run.exporter.wide_from
    )
    # documents spread over several shards are keyed by their file's hash: known first,
    # and recorded for a resume before any shard is done; a small text file read whole is
    # keyed by the sha256 its reader takes (and hands back: encode)
    if run.split_by in ("document", "hash"):
        run.hashes = _all_hashes(run, but=run.read_whole)


def encode(run: Run) -> None:
    """The encode pass: every shard writes its ids (resuming finished shards)."""
    tasks, parts = _encode_tasks(run)
    work = tasks[0].marker and Path(tasks[0].marker).parent
    whole = run.read_whole
    done = {}
    if work and any(work.glob("*.done")):  # an earlier run's shards: reuse them only
        run.hashes = _all_hashes(run)  # if the input is still the same
        if _recorded_inputs(work) == _inputs_record(_without(run.hashes, whole), run.before):
            done = {t.shard.index: r for t in tasks
                    if (r := finished(t, run.itemsize, run.hashes))}  # fmt: skip
        for stale in () if done else work.glob("*.done"):
            stale.unlink()
    todo = _taking_order([t for t in tasks if t.shard.index not in done])
    if done:
        print(f"corpusprep: resuming: {len(done)} of {len(tasks)} shards were done by an "
              "earlier run (same input sha256)", file=sys.stderr)  # fmt: skip
    with disk_errors(run.out.label, _space_needed(run)):
        hashing = written = None
        # the small files read whole are hashed by their readers (their shards' markers
        # keep the digests); the others' digests are recorded for a resume: known already
        # (documents are keyed by them; a resume checked them), before any shard starts
        # (a marker written before the record is lost to a driver killed then, and a
        # killed driver's Slurm array runs on), else (one text) taken while the workers
        # encode (0.1 s per 100 MB that no core could share) and recorded then. A resume
        # found this input's record there (the shards it took): kept as it is, else a
        # resume killed before its first shard came in would leave nothing to resume from
        if work and not done:
            if all(f.name in run.hashes or f.name in whole for f in run.files):
                _record_inputs(run, _inputs_record(_without(run.hashes, whole), run.before))
            else:
                (work / INPUTS).unlink(missing_ok=True)  # an earlier run's: of other bytes
                hashing = Meanwhile(partial(_hash_and_record, run, whole))
        runs = _runs(todo, run.executor.parallelism() if todo else None)
        # an input's error is said of the earliest shard in the input, not in taking order
        ranks = [r.tasks[0].shard.index for r in runs]
        fresh = (result for results in run.executor.map(encode_run, runs, ranks)
                 for result in results)  # fmt: skip
        if work is None:  # shards write in place (no resume): the input's sha256 while the
            # workers encode, not before they start, and the outputs' as they are written
            hashing = Meanwhile(lambda: _all_hashes(run))
            written = DigestWhileWriting(todo, run.itemsize, run.out)
            fresh = written.following(hashing.once_started(fresh), todo)
        elif hashing is not None:
            fresh = hashing.once_started(fresh)
        fresh = _within_max_bytes(fresh, run.files, list(done.values()))
        # read to the end: the bar closes drawn full, even for one shard
        try:
            fresh = list(_progress(fresh, [t.shard for t in todo], "encode", run.settings.quiet))
        except Exception:  # a shard failed for good: the ones that finished stay resumable
            if work and hashing is not None:
                with contextlib.suppress(Exception):  # the shard's error is the one to say
                    hashing.result()
            raise
        finally:
            let_go_of_readers()
        if hashing is not None:
            run.hashes = hashing.result()
        run.hashes = {**run.hashes, **{n: d for r in fresh for n, d in r.digests.items()}}
        run.hashes = _all_hashes(run)  # each known by now; the manifest lists every one
        done.update(zip((t.shard.index for t in todo), fresh))
        run.results = [done[t.shard.index] for t in tasks]
        _check_unchanged(run.before, {n: i for r in fresh for n, i in r.read_as.items()})
        for result in fresh:  # 50,311 files: 15 MB the manifest can use instead
            result.read_as = {}
    run.parts = parts


def _within_max_bytes(results: Iterable[Any], files: list[InputFile],
                      done: list[EncodeResult]) -> Iterator[Any]:  # fmt: skip
    """The shards' results (EncodeResult; ScanResult in the scan pass), stopping the run
    as soon as the text read of a file whose shards are capped apart (Parquet) adds up to
    more than source.max_bytes: each shard stops at the cap by itself, but a file cut into
    many shards would pass any cap."""
    caps = {f.name: f.max_bytes for f in files if f.capped_in_shards}
    read: dict[str, int] = dict.fromkeys(caps, 0)

    def add(result: EncodeResult) -> None:
        for name in caps.keys() & result.read_bytes.keys():
            read[name] += result.read_bytes[name]
            if read[name] > caps[name]:
                from corpusprep.formats.parquet import past_max_bytes

                raise past_max_bytes(name, caps[name])

    for result in done:
        add(result)
    for result in results:
        add(result)
        yield result


def choose_sides(run: Run) -> None:
    """Once the documents are counted: which go to val (split_by=document, HF's
    train_test_split), and each side's order (order=shuffle)."""
    if not run.scans:
        _take_counts(run, run.results)
    settings = run.settings
    if run.split_by == "document":
        if run.docs == 1 and not run.skipped and len(run.files) == 1:
            _refuse_one_cut_document(run.files[0])
        val = val_document_count(run.docs, settings.split, settings.val_size)
        run.val_docs = val_documents(run.docs, val, settings.seed)
    if settings.order == "shuffle":  # each side's documents, in the permutation's order
        perm = permutation(run.docs, settings.seed)
        run.order = {"val": perm, "train": perm}  # narrowed to each side below


def _refuse_one_cut_document(file: InputFile) -> None:
    """One text to cut into documents that came out as one: said as that, not as a split
    that leaves train empty. A \\n in the value is most often a newline meant, written on
    the command line, where quotes keep it as a backslash and an n."""
    for key in ("doc_end", "doc_separator"):
        value = getattr(file, key, None)
        if not value:
            continue
        tip = ""
        escaped = re.search(r"\\[ntr]", value)
        said = f"{escaped[0]} there is a backslash and a letter" if escaped else ""
        if escaped and key == "doc_separator":
            tip = (f" ({said}; a separator is a line of its own: give its text, e.g. "
                   "'source.doc_separator=\"<|endoftext|>\"')")  # fmt: skip
        elif escaped and _bash_escapes_only(value):
            tip = (f" ({said}: on the command line give bash's $'source.doc_end=\"{value}\"', "
                   "which makes \\n a newline, \\t a tab and \\r a carriage return, or set it "
                   "in a YAML file)")  # fmt: skip
        elif escaped:
            tip = f" ({said}: set it in a YAML file)"
        raise UserError(
            f"{file.name}: source.{key}={_quoted(value)} leaves it one document, which a "
            f"split by document cannot split; check source.{key}, or split it by position "
            f"(split_by=position){tip}"
        )


def _bash_escapes_only(value: str) -> bool:
    """Whether bash's $'...' and Hydra's quotes give back exactly this value with each \\n,
    \\t and \\r made a control character: no other backslash, no quote, no ${ (Hydra would
    resolve it), nothing that is not printable."""
    rest = re.sub(r"\\[ntr]", "", value)
    return value.isprintable() and not re.search(r"[\\'\"]|\$\{", rest)


def _quoted(value: str) -> str:
    """A string setting in quotes, for one line: repr if it holds both quotes or a
    character that is not printable (a newline)."""
    if value.isprintable() and "'" not in value:
        return f"'{value}'"
    return f'"{value}"' if value.isprintable() and '"' not in value else repr(value)


def merge_parts(run: Run) -> None:
    """The parts become train/val in the chosen order (and cut at N tokens for head/tail)."""
    settings, results = run.settings, run.results
    if not run.parts:  # the shards wrote in place
        run.merged = Merged({side: sum(getattr(r, f"{side}_tokens") for r in results)
                             for side in SIDES},
                            {side: sum(getattr(r, f"{side}_docs") for r in results)
                             for side in SIDES})  # fmt: skip
    else:
        order = None
        if run.order is not None:
            order = _side_orders(run.order["train"], run.val_docs, run.split_by, results)
        cut = (run.split_by, settings.val_size) if run.split_by in ("head", "tail") else None
        if cut and cut[1] >= sum(r.train_tokens for r in results):
            raise UserError(
                f"val_size={cut[1]:,}: the corpus has only "
                f"{sum(r.train_tokens for r in results):,} tokens; choose a smaller val_size"
            )
        with disk_errors(run.out.label, _space_needed(run, sum(r.tokens for r in results))):
            run.merged = merge(run.out, run.parts, results, run.dtype, order, cut,
                               run.val_docs, run.token_bytes, shown(settings.quiet))  # fmt: skip
    run.clock.lap("encode")
    for side in SIDES:
        if run.merged.tokens[side] == 0:
            asked = (f"val_size={settings.val_size}" if settings.val_size is not None
                     else f"split={settings.split}")  # fmt: skip
            raise UserError(
                f"{run.name}: {asked} by {run.split_by} leaves {side} empty "
                f"({run.docs:,} documents); use more documents or another "
                f"{asked.split('=')[0]}"
            )
    warn_small(run.merged.tokens, settings, str(run.cfg.get("name")))


def warn_small(tokens: dict[str, int], settings: Settings, name: str) -> None:
    """A side shorter than a few of nanoGPT's blocks gets a warning: train.py's get_batch
    draws block_size + 1 tokens at a time, and a loss over a few tokens says nothing."""
    few = FEW_BLOCKS * BLOCK_SIZE
    small = [side for side in SIDES if tokens[side] < few]
    if not small:
        return
    counts = f"train {tokens['train']:,}, val {tokens['val']:,} tokens"
    if sum(tokens.values()) < 2 * few:
        fix = "a bigger corpus is needed to train on"
    elif settings.val_size is not None:  # it alone sizes val (document, head, tail)
        fix = f"change val_size (now {settings.val_size})"
    else:
        fix = f"change split (now {settings.split})"
    print(f"corpusprep: warning: {name}: {' and '.join(small)} under {FEW_BLOCKS} blocks of "
          f"{BLOCK_SIZE} tokens (nanoGPT's default block_size; {counts}); {fix}",
          file=sys.stderr)  # fmt: skip


COUNT_CHUNK = 1 << 20  # ids counted at a time (np.bincount makes a 64-bit copy of them)


def measure(run: Run) -> None:
    """What a sweep compares tokenizers by: the val text's UTF-8 bytes (from each id's byte
    length: bits per byte need it), bytes per val token, and how many distinct ids the
    corpus uses. Counted where the ids go by (the ids each shard wrote; val's bytes by the
    shards where they choose the sides, else by the split); the rest in one pass over the
    merged ids."""
    sizes = run.token_bytes  # the tokenizer's, taken once as the encode pass was planned
    used = np.zeros(len(sizes), dtype=bool)
    known = run.tokenizer.ids_used()  # char: every id (its characters came from the corpus)
    if known is None:  # else what the shards wrote, if each said
        known = _ids_seen(run.results, len(sizes))
    val_bytes = run.merged.val_bytes  # counted as documents were split to val, or by the
    counted = [r.val_bytes for r in run.results]  # shards that chose the sides as they wrote
    if val_bytes is None and None not in counted:
        val_bytes = sum(counted)
    # read what is not known yet: both sides for the ids used, val for its bytes
    todo = [side for side in SIDES if known is None or (side == "val" and val_bytes is None)]
    chunk = np.empty(COUNT_CHUNK, dtype=run.dtype)  # read into, not mapped: memory stays flat
    for side in todo:
        path = run.out.path_of(f"{side}.bin")
        if path is None or run.merged.tokens[side] == 0:
            continue
        counts = np.zeros(len(sizes), dtype=np.int64)
        with open(path, "rb") as f:  # buffered: readinto fills the chunk but at the end
            while n := f.readinto(memoryview(chunk).cast("B")) // chunk.itemsize:
                counts += np.bincount(chunk[:n], minlength=len(sizes))[: len(sizes)]
        used |= counts > 0
        if side == "val":
            val_bytes = int(counts @ sizes.astype(np.int64))
    val_bytes = val_bytes or 0
    run.stats = {"val_bytes": val_bytes,
                 "bytes_per_token": round(val_bytes / max(run.merged.tokens["val"], 1), 4),
                 "vocab_used": int(used.sum()) if known is None else known}  # fmt: skip
    run.clock.lap("measure")


def _ids_seen(results: list[EncodeResult], vocab: int) -> Optional[int]:
    """How many of the vocabulary's ids the shards wrote, from each shard's flags (None if
    a shard has none: one resumed from an earlier run)."""
    if not results or any(r.ids_seen is None for r in results):
        return None
    flags = np.bitwise_or.reduce([r.ids_seen for r in results])  # one tokenizer: one length
    return int(np.unpackbits(flags)[:vocab].sum())


def export(run: Run) -> None:
    """The format's files, from the finished streams."""
    out = run.out
    with disk_errors(out.label, _space_needed(run, sum(run.merged.tokens.values()))):
        run.produced = run.exporter.export(
            Streams(out.path_of("train.bin"), out.path_of("val.bin"),
                    out.path_of("train.docs.bin"), out.path_of("val.docs.bin"), run.dtype,
                    run.tokenizer.vocab_size, run.eot_id, str(run.cfg.get("name")),
                    show=shown(run.settings.quiet)),
            out,
        )  # fmt: skip


def _meta_bytes(meta: dict[str, Any], vocab_size: int) -> bytes:
    """meta.pkl's bytes, within what load() and inspect read (MAX_META_BYTES): a folder
    they would call damaged is never written (the old outputs stay)."""
    import pickle

    from corpusprep.dataset import MAX_META_BYTES

    data = pickle.dumps(meta)
    if len(data) > MAX_META_BYTES:
        raise UserError(
            f"tokenizer: its meta.pkl would be {len(data) / 2**20:,.0f} MB ({vocab_size:,} ids), "
            f"more than the {MAX_META_BYTES >> 20} MB corpusprep's load() and inspect read; use "
            "a tokenizer with fewer tokens"
        )
    return data


def commit(run: Run) -> dict[str, Any]:
    """meta.pkl and the manifest; everything renamed into place together."""
    manifest = _manifest(run)
    for name in _previous_files(run.out.out_dir):  # another format or fewer shards before
        if name not in run.produced:
            run.out.obsolete(name)
    staying = [entry.name for entry in os.scandir(run.out.out_dir)  # the user's own files
               if not entry.name.startswith(".") and entry.name not in run.produced
               and not run.out.removes(entry.name)]  # fmt: skip
    run.exporter.warn_others(staying, str(run.cfg.get("name")))  # the files' stem
    meta = run.tokenizer.meta()
    if meta is None and "meta.pkl" in staying:  # nanoGPT's train.py would read it
        print(f"corpusprep: warning: {run.cfg.get('name')}: out_dir holds a meta.pkl this run "
              "does not write (its tokenizer has none), from which nanoGPT's train.py and "
              "sample.py would take the vocabulary; move it out of out_dir",
              file=sys.stderr)  # fmt: skip
    if not run.replacing and not (run.out.out_dir / MANIFEST).exists():
        run.replacing = _replacing_others(run, meta is not None)
    if meta is not None:  # None: no meta.pkl (GPT-2, nanoGPT's default without one)
        run.out.write_bytes("meta.pkl", _meta_bytes(meta, run.tokenizer.vocab_size))
    for name, data in run.tokenizer.files().items():  # a trained vocabulary
        run.out.write_bytes(name, data)
    if run.token_bytes is not None:  # each id's UTF-8 length (nanochat's token_bytes)
        buffer = io.BytesIO()
        np.save(buffer, run.token_bytes, allow_pickle=False)
        run.out.write_bytes(TOKEN_BYTES, buffer.getvalue())

    def timed(manifest: dict[str, Any]) -> dict[str, Any]:  # taken once the files are sealed
        run.clock.lap("commit")
        return {**manifest, "seconds": {**run.clock.laps, "total": run.clock.total()}}

    # the writer adds every file's size and sha256, and writes the manifest last
    committed = run.out.commit(manifest, timed)
    if run.replacing:  # said once it is true: a commit that fails replaces nothing
        print(escape_controls(run.replacing), file=sys.stderr)  # the old manifest's values
    return committed


def _replacing_others(run: Run, meta: bool) -> Optional[str]:
    """The line said when the commit replaces files of an out_dir no corpusprep run made
    (nanoGPT's own prepare.py wrote train.bin and val.bin there): which ones (`meta`: this
    run writes a meta.pkl)."""
    ours = [*run.produced, *(["meta.pkl"] if meta else [])]
    names = [n for n in ours if (run.out.out_dir / n).is_file()]
    if not names:
        return None
    listed = ", ".join(names)
    where = run.settings.out_dir
    return f"corpusprep: replacing {listed} in {where}, which no corpusprep run wrote (no manifest)"


def _side_orders(perm: np.ndarray, val_docs: Optional[np.ndarray], split_by: str,
                 results: list[EncodeResult]) -> dict[str, np.ndarray]:  # fmt: skip
    """Each side's documents in the permutation's order, as indices into that side's
    documents in corpus order (what the merged index lists)."""
    if split_by in ("head", "tail"):  # one stream, cut after ordering
        return {"train": perm, "val": np.zeros(0, np.int64)}
    orders = {}  # split_by=document (hash with a shuffle is refused in plan_shards)
    for side, mask in (("val", val_docs), ("train", ~val_docs)):
        local = np.cumsum(mask) - 1  # a document's index among its side's documents
        orders[side] = local[perm[mask[perm]]]
    return orders


def is_single_text(files: list[InputFile]) -> bool:
    """One plain text, nanoGPT's case: split by position, no end-of-text tokens by default."""
    file = files[0]
    return len(files) == 1 and file.format == "text" and not (file.doc_separator or file.doc_end)


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
    after any newline for char and byte; a compressed file by position in its text,
    unless the tokenizer is as fast as decompressing), small files packed together, up to
    shard_bytes."""
    cut = tokenizer.cut_at
    boundary = None if cut == NOWHERE else re.compile(cut or rb"\n")
    shard_bytes = balanced_shard_bytes(files, shard_bytes)
    for name in sorted({f.format for f in files}):
        get_format(name).check_files([f for f in files if f.format == name])
    shards, run, size = [], [], 0
    for file in files:
        # a compressed text in pieces: for a rule whose matches are one byte (see
        # ONE_BYTE_CUTS), and not for a tokenizer that trains, whose sample takes a long
        # text by its place in it (Format.before), which such a piece does not know
        text_pieces = cut in ONE_BYTE_CUTS and not tokenizer.needs_fit
        pieces = not tokenizer.fast and (file.format != "text" or text_pieces)
        segments = get_format(file.format).plan(file, shard_bytes, boundary, pieces)
        for start, end, nbytes in segments:
            if run and size + nbytes > shard_bytes:
                shards.append(Shard(len(shards), tuple(run)))
                run, size = [], 0
            run.append(Segment(file, start, end, nbytes, cut))  # cut: bounds what is held
            size += nbytes
    if run:
        shards.append(Shard(len(shards), tuple(run)))
    return shards


ENOUGH_SHARDS = 64  # shards a corpus is cut into at least, where they stay MIN_SHARD_BYTES
MIN_SHARD_BYTES = 1 << 20


def balanced_shard_bytes(files: list[InputFile], shard_bytes: int) -> int:
    """The shard size used: shard_bytes, or less for a corpus under ENOUGH_SHARDS of them,
    so that uneven text (code, prose, data: shards of very different cost) still spreads
    over every worker; never under MIN_SHARD_BYTES (a shard costs a few ms of its own),
    and a corpus under two of those is one shard, encoded without starting any worker
    (which would cost more than it saves). From the input's size alone: the plan never
    depends on the workers."""
    text = sum(file.whole()[2] for file in files)
    least = text if text < 2 * MIN_SHARD_BYTES else MIN_SHARD_BYTES
    return max(1, min(shard_bytes, max(text // ENOUGH_SHARDS, least)))


def _val_token_bytes(run: Run) -> Optional[np.ndarray]:
    """Each id's UTF-8 bytes, for the workers to count val's text as they write it, where
    they decide which side each id goes to (split_by=position or hash; the others split
    after the merge): in the fewest bytes that hold them, as they go to every worker."""
    sizes = run.token_bytes
    if run.split_by not in ("position", "hash") or sizes is None or not len(sizes):
        return None
    return sizes.astype(np.uint8) if sizes.min() >= 0 and sizes.max() < 256 else sizes


def _encode_tasks(run: Run) -> tuple[list[EncodeTask], list[PartFile]]:
    """Where each shard writes. For one text split by position, when the token count
    follows from the character count (char tokenizer) and the workers share this machine,
    shards write straight into train.bin / val.bin at known places. Otherwise each writes
    part files of its own (plus where documents start, unless one text) and a completion
    marker, in a work folder a re-run can resume from; parts are merged in plan order."""
    tokenizer, out, settings = run.tokenizer, run.out, run.settings
    scans = run.scans or [ScanResult(0, "", 0, 0)] * len(run.shards)  # one pass: not needed
    firsts = np.cumsum([0] + [s.chars for s in scans[:-1]]).tolist()
    first_docs = np.cumsum([0] + [s.docs for s in scans[:-1]]).tolist()
    sides = [_side_chars(f, s.chars, run.split_char) for f, s in zip(firsts, scans)]
    counts = [(tokenizer.tokens_for(t), tokenizer.tokens_for(v)) for t, v in sides]
    known = all(t is not None and v is not None for t, v in counts)
    in_place = run.executor.shared_files and run.single and run.split_by == "position"
    # split_by=document (and head/tail): every document to one stream, split at the merge
    one_stream = run.split_by in ("document", "head", "tail")
    in_place = in_place and run.eot == "none" and known
    work = None if in_place else out.work(run.run_key)
    if work is not None:
        run.executor.attach(work)
    run.in_place = in_place
    if in_place:
        totals = [sum(c[k] for c in counts) for k in (0, 1)]
        check_free_space(out.out_dir, sum(totals) * run.itemsize,
                         _space_needed(run, sum(totals)))  # fmt: skip
        paths = [out.temp(f"{side}.bin", totals[k] * run.itemsize)
                 for k, side in enumerate(SIDES)]  # fmt: skip
        position = [0, 0]
    doc_keys = {name: digest[:16] for name, digest in run.hashes.items()}
    run.token_bytes = tokenizer.token_bytes()
    rules = Rules(tokenizer, run.dtype, "stream" if run.split_by == "document" else run.split_by,
                  settings.split, run.split_char, settings.seed, run.eot, run.eot_id,
                  _val_token_bytes(run))  # fmt: skip
    tasks, parts = [], []
    for shard, first, first_doc, chars, count in zip(run.shards, firsts, first_docs, sides,
                                                     counts):  # fmt: skip
        targets, index = [], [None, None]
        for k, side in enumerate(SIDES):
            if in_place:
                targets.append(Target(str(paths[k]), position[k]) if chars[k] else None)
                position[k] += count[k] or 0
                continue
            if one_stream and side == "val":
                targets.append(None)
                continue
            part = work / f"{side}.{shard.index:06d}.part"
            targets.append(Target(str(part), fresh=True))
            if not run.single:
                index[k] = str(work / f"{side}.{shard.index:06d}.docs")
            parts.append(PartFile(shard.index, side, str(part), index[k]))
        keys = {
            s.file.name: doc_keys[s.file.name] for s in shard.segments if s.file.name in doc_keys
        }
        marker = None if work is None else str(work / f"{shard.index:06d}.done")
        tasks.append(EncodeTask(shard, rules, first_char=first, first_doc=first_doc,
                                doc_keys=keys, train=targets[0], val=targets[1],
                                train_index=index[0], val_index=index[1],
                                marker=marker))  # fmt: skip
    return tasks, parts


SIZE_CLASSES = 8  # shards within an eighth of the largest's size count as the same size


def _taking_order(tasks: list[EncodeTask]) -> list[EncodeTask]:
    """The order workers take the shards in (results still merge in plan order): the last
    pieces of compressed files whose size is a guess first (often the longest), then the
    longest first, so that none is left to run alone at the end while the other workers
    idle (Parquet row groups held in their dictionary pages stay whole: 2 to 20 MB each in
    the benchmark's files); shards of about the same size in plan order (a file's pieces
    stay together, for a worker to read on through, and the bar advances as they end)."""
    largest = max((t.shard.nbytes for t in tasks), default=0) or 1
    classes: list[int] = []  # a file's next piece goes with the piece before, whatever its size
    for i, task in enumerate(tasks):
        follows = i > 0 and _follows(task.shard, tasks[i - 1].shard)
        # the largest is of the top eighth's class, not of a class of its own
        size = min(task.shard.nbytes * SIZE_CLASSES // largest, SIZE_CLASSES - 1)
        classes.append(classes[-1] if follows else size)
    order = sorted(range(len(tasks)), key=lambda i: (_runs_long(tasks[i]), classes[i]),
                   reverse=True)  # fmt: skip
    return [tasks[i] for i in order]


def _runs_long(task: EncodeTask) -> bool:
    """A compressed file's last piece, when its text's size is a guess: its end is the
    file's, wherever the guess put its start."""
    return any(s.piece and s.end == STREAM_END and not s.file.size_bounded
               for s in task.shard.segments)  # fmt: skip


T = TypeVar("T")
GUIDE = 2  # a run of pieces holds at most 1 / (GUIDE * workers) of the work left


def _itself(shard: Shard) -> Shard:
    return shard


def _runs(tasks: list[EncodeTask], workers: Optional[int]) -> list[ShardRun]:
    """The tasks in the runs the workers take them in (_in_runs)."""
    return [ShardRun(run) for run in _in_runs(tasks, workers, _task_shard)]


def _task_shard(task: EncodeTask) -> Shard:
    return task.shard


def _in_runs(items: list[T], workers: Optional[int], shard_of: Callable[[T], Shard]
             ) -> list[tuple[T, ...]]:  # fmt: skip
    """The items (tasks or shards) as the workers take them: consecutive pieces of one
    compressed file, or of one Parquet row group, go in runs that one worker does one
    after the other, reading on where the piece before ended (instead of decompressing the
    file from its start again, or decoding the row group's pages, to skip to its piece).
    A run holds at most 1 / (GUIDE * workers) of the work left, so runs shrink toward the
    end and the last ones even out the workers (guided scheduling). Only the scheduling
    depends on the workers: the shards, and so the outputs, do not. An engine that does
    not say how many tasks it runs at once gets the items one by one."""
    if workers is None:
        return [(item,) for item in items]
    left = sum(shard_of(item).nbytes for item in items)  # the work not yet in a run
    runs: list[tuple[T, ...]] = []
    run: list[T] = []
    size, budget = 0, 0.0
    for item in items:
        shard = shard_of(item)
        if run and _follows(shard, shard_of(run[-1])) and size + shard.nbytes <= budget:
            run.append(item)
            size += shard.nbytes
            continue
        if run:
            runs.append(tuple(run))
            left -= size
        run, size, budget = [item], shard.nbytes, left / (GUIDE * workers)
    if run:
        runs.append(tuple(run))
    return runs


def _follows(shard: Shard, before: Shard) -> bool:
    """Whether a shard is the piece of a file right after another's, that a worker reads
    on into (of a compressed file: its stream; of a Parquet row group: its pages)."""
    if len(shard.segments) != 1 or len(before.segments) != 1:
        return False
    (a,), (b,) = before.segments, shard.segments
    return get_format(a.file.format).reads_on(a, b)


def _side_chars(first: int, chars: int, split_char: int) -> tuple[int, int]:
    """How many of a shard's characters fall on the train side and on the val side."""
    train = min(max(split_char - first, 0), chars)
    return train, chars - train


def _hashes(files: list[InputFile], threads: Optional[int] = None) -> dict[str, bytes]:
    """sha256 of every input file (a zip member: of its archive, plus its name). Files are
    hashed side by side, `threads` at most (default: a thread per core; hashlib lets go of
    the GIL): documents are keyed by these digests before the first shard starts, and one
    file after another, FineWeb's 14 files of 2 GB kept every core waiting for 20 s."""
    paths = list(dict.fromkeys(f.path for f in files))
    settled, stop = threading.Condition(), threading.Event()  # stop: a failure, or a Ctrl-C
    found: dict[str, bytes] = {}
    failed: dict[str, BaseException] = {}

    def hash_one(path: str) -> None:
        try:
            digest, error = bytes.fromhex(file_sha256(Path(path))), None
        except BaseException as e:  # said in the driver, as if hashed there
            digest, error = None, _removed(path) if isinstance(e, FileNotFoundError) else e
        with settled:
            if error is None:
                found[path] = digest
            else:
                failed[path] = error
                stop.set()
            settled.notify()

    def answered() -> bool:
        """Every file hashed, or one failed and every file before it is settled: its error
        is the one to say (the inputs' first), whatever later files are still doing."""
        if not failed:
            return len(found) == len(paths)
        first = min(map(paths.index, failed))
        return all(p in found or p in failed for p in paths[:first])

    # daemon threads: neither a Ctrl-C nor an error waits for a 100 GB file's digest
    try:
        in_threads(paths, hash_one, min(len(paths), threads or available_cores()), stop)
        with settled:
            while not answered():
                settled.wait()
    finally:  # said or interrupted: no thread starts on another file
        stop.set()
    if failed:  # raised in a thread: the caller's context is not its
        raise failed[min(failed, key=paths.index)] from None
    # by name for documents (a zip member's own key), by path for the files on disk
    return {**found, **{f.name: _member_digest(found[f.path], f.member) for f in files}}


def _read_whole(shards: list[Shard]) -> set[str]:
    """The small text files read whole: their reader hashes the bytes it read, keys their
    document by them and hands the digest back (200,000 of them took seconds to hash before
    any shard, and were read twice)."""
    from corpusprep.formats.text import read_whole

    return {s.file.name for shard in shards for s in shard.segments if read_whole(s)}


def _without(hashes: dict[str, bytes], names: set[str]) -> dict[str, bytes]:
    return {name: digest for name, digest in hashes.items() if name not in names}


def _all_hashes(run: Run, but: Collection[str] = ()) -> dict[str, bytes]:
    """run.hashes with the sha256 of every input but those named in `but`: those not taken
    yet taken now."""
    missing = [f for f in run.files if f.name not in run.hashes and f.name not in but]
    return {**run.hashes, **_hashes(missing, run.cores)} if missing else run.hashes


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


def fingerprint(run: Run, input_digest: str, max_id: Optional[int]) -> str:
    """What the outputs depend on: the input bytes, the resolved settings that shape the
    output, corpusprep's version and the tokenizer's (its library version, its files).
    `max_id`: the tokenizer's largest id where known, for as_auto."""
    tokenizer = run.tokenizer
    read = run.settings  # the values the run uses: a key unset with ~key reads as its default
    settings = {**OmegaConf.to_container(run.cfg, resolve=True), "split": read.split,
                "dtype": read.dtype, "split_by": read.split_by, "eot": read.eot,
                "seed": read.seed, "val_size": read.val_size, "order": read.order}  # fmt: skip
    settings = as_auto(settings, run, max_id)
    settings = {k: v for k, v in settings.items() if k not in NOT_IN_FINGERPRINT}
    settings["source"] = {k: v for k, v in settings.get("source", {}).items()
                          if k not in SOURCE_NOT_IN_FINGERPRINT}  # fmt: skip
    described = tokenizer.identity()
    # keys that never change the ids (tiktoken's backend) count as one value each
    same_ids = getattr(tokenizer, "FINGERPRINT_AS", {})
    described = {k: v for k, v in described.items() if k not in same_ids}
    if isinstance(settings.get("tokenizer"), dict):
        settings["tokenizer"].update(
            {k: v for k, v in same_ids.items() if k in settings["tokenizer"]}
        )
    data = {"input": input_digest, "settings": settings, "corpusprep": corpusprep.__version__,
            "tokenizer": described}  # fmt: skip
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def as_auto(settings: dict[str, Any], run: Run, max_id: Optional[int]) -> dict[str, Any]:
    """`settings` with each value auto would have chosen said as auto (split_by=position
    and eot=none for one text, dtype=uint16 where every id fits): the same files, so the
    same fingerprint. Only what is known before any run learns a vocabulary counts."""
    single = is_single_text(run.files)
    chosen = {"split_by": "position" if single else "document"}
    if single or not run.learns:
        chosen["eot"] = eot_mode("auto", single, run.tokenizer)
    if max_id is not None:
        chosen["dtype"] = choose_dtype("auto", max_id, run.exporter.wide_from)
    return {k: "auto" if k in chosen and v == chosen[k] else v for k, v in settings.items()}


def _max_id(run: Run, made: dict[str, Any]) -> Optional[int]:
    """The largest id of the tokenizer, or for one that learns, of the vocabulary a run
    `made` learnt: from the same input and settings this run learns the same one."""
    if not run.learns:
        return run.tokenizer.max_id
    vocab = made.get("vocab_size")
    return vocab - 1 if isinstance(vocab, int) and not isinstance(vocab, bool) else None


def _read_manifest(folder: Path) -> Optional[dict[str, Any]]:
    """The manifest.json an earlier run left in `folder`, if it is there and readable."""
    from corpusprep.dataset import MAX_MANIFEST_BYTES, read_json

    try:  # bounded, a regular file: a FIFO there would block, /dev/zero never end
        manifest = read_json(folder / "manifest.json", MAX_MANIFEST_BYTES)
    except UserError:  # missing, damaged, made to fill memory: not a finished run
        return None
    return (
        manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None
    )


def finished_manifest(out_dir: str, run: Run,
                      manifest: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:  # fmt: skip
    """`manifest` (read from out_dir: _read_manifest) if its run finished, its outputs all
    there and whole; then with the input's sha256 in run.hashes, taken side by side with
    the outputs'."""
    folder = Path(out_dir)
    if manifest is None or not manifest["files"]:
        return None
    # a skipped run must be right: every file's size, then its bytes (1-2 GB/s a core); a
    # folder without checksums is from an older version: redo it
    stop = threading.Event()  # the input's hashing failed (or a Ctrl-C): no more reading
    checking = Meanwhile(partial(changed_files, folder, manifest, run.cores, stop))
    checking.start()
    try:
        run.hashes = _all_hashes(run)
    except BaseException:
        stop.set()
        raise
    changed = checking.result()
    if changed:  # said at the commit, as a replacement is (a run that fails says one line)
        more = f" (nor did {len(changed) - 1} more)" if len(changed) > 1 else ""
        run.replacing = (f"corpusprep: note: {os.path.join(out_dir, changed[0])} did not match "
                         f"its manifest{more}: changed since its run; made again")  # fmt: skip
    if changed != []:  # (None: an older version's folder, without checksums)
        return None
    from corpusprep.dataset import READ_FORMATS, load

    kind = (manifest.get("format") or {}).get("kind", "nanogpt")
    try:  # and the files add up to what it describes (each side's ids, their count)
        if kind in READ_FORMATS:  # (a plugin's format: its checksums only)
            load(folder, tokenizer=False, check_ids=False)
    except UserError:  # a manifest edited to fit a cut or missing file, say: redone
        return None
    return manifest


INPUTS = "inputs.json"  # in a work folder: the input its shards come from


def _inputs_record(hashes: dict[str, bytes], before: dict[str, Identity]) -> dict:
    """What a resume must find again to reuse the shards: every input's sha256, and its
    identity when the run began (a file written since, even with the same bytes put back
    before the resume, has another ctime: shards may have read anything in between)."""
    return {
        "sha256": {name: digest.hex() for name, digest in sorted(hashes.items())},
        "identity": {path: list(identity) for path, identity in sorted(before.items())},
    }


def _record_inputs(run: Run, record: dict) -> None:
    run.out.write_work_file(INPUTS, json.dumps(record).encode())


def _hash_and_record(run: Run, whole: Collection[str] = ()) -> dict[str, bytes]:
    """The sha256 of the inputs but those read `whole` (their readers hash them), recorded
    for a resume only if no input file was touched since the run first looked at them
    (before any shard read it): a file changed in place while it was hashed (even with its
    size and mtime put back) leaves no record, and shards made from it are never reused."""
    hashes = _all_hashes(run, but=whole)
    if all(file_identity(_stat(path)) == identity for path, identity in run.before.items()):
        _record_inputs(run, _inputs_record(_without(hashes, whole), run.before))
    return hashes


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise _removed(path) from None


@contextlib.contextmanager
def kept_in_place(run: Run) -> Iterator[None]:
    """A file gone from under the run (another process moved out_dir away, or removed an
    input): one line saying which, never tried again (executors return it as such)."""
    try:
        yield
    except FileNotFoundError as e:
        if e.filename is None or os.path.lexists(e.filename):
            raise  # not gone for the driver: not another process's doing
        gone = os.path.abspath(os.fsdecode(e.filename))
        out_dir = os.path.abspath(run.settings.out_dir)
        if gone == out_dir or gone.startswith(out_dir + os.sep):
            if not os.path.isdir(out_dir):
                raise UserError(f"out_dir={run.settings.out_dir}: the folder was moved or "
                                "removed during the run; run again") from None  # fmt: skip
            raise UserError(f"out_dir={run.settings.out_dir}: {os.path.relpath(gone, out_dir)} "
                            "was removed during the run (by another process?); run again"
                            ) from None  # fmt: skip
        inputs = {os.path.abspath(f.path): f.path for f in run.files}
        if gone in inputs:
            raise _removed(inputs[gone]) from None
        raise


def _removed(path: str) -> UserError:
    return UserError(f"{path}: the file was removed while it was being read; run again")


def _recorded_inputs(work: Path) -> Optional[dict[str, Any]]:
    """What a resume must find again (_inputs_record), if the work folder holds it whole."""
    from corpusprep._paths import read_regular

    try:  # a few hundred bytes an input: a bigger or nested file is not one we wrote
        return json.loads(read_regular(work / INPUTS, MAX_INPUTS_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):
        return None


MAX_INPUTS_RECORD_BYTES = 256 << 20


def _space_needed(run: Run, tokens: Optional[int] = None) -> int:
    """About how many bytes the run writes at its peak (kept as run.out.needed, which the
    writer's own messages say): its ids twice, as shard parts and then merged (once where
    shards write in place; three times where the merge reorders them: order=shuffle,
    split_by=head/tail), once more for a format that copies them into files of its own
    (llmc, npy), plus token_bytes.npy (an int32 per id). Before `tokens` are counted, the
    tokenizer's estimate from the text's bytes."""
    if tokens is None:
        tokens = run.tokenizer.tokens_about(sum(shard.nbytes for shard in run.shards))
    reorders = run.settings.order == "shuffle" or run.split_by in ("head", "tail")
    copies = (1 if run.in_place else 2) + reorders + run.exporter.copies_ids
    max_id = None if run.learns else run.tokenizer.max_id
    run.out.needed = copies * tokens * run.itemsize + 4 * (max_id or 0)
    return run.out.needed


def plan_digest(shards: list[Shard]) -> str:
    """A digest of the shard plan: which units of which files each shard covers. A
    Parquet segment's units are named (rows): the same version planned row groups before,
    and the same numbers as those must never name a work folder a resume takes markers
    from (two rows and an empty row group: (0, 1), (1, 2) either way)."""
    text = "\n".join(
        f"{shard.index}:"
        + ";".join(
            f"{s.file.name}@{s.start}-{s.end}{' rows' * (s.file.format == 'parquet')}"
            for s in shard.segments
        )
        for shard in shards
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _stat_digest(stats: dict[str, Identity]) -> str:
    """Cheap stand-in for the input's hash when naming a work folder: paths, sizes, times."""
    seen = sorted((path, st.size, st.mtime_ns) for path, st in stats.items())
    return hashlib.sha256(repr(seen).encode()).hexdigest()


def _previous_files(folder: Path) -> list[str]:
    """The output files a finished earlier run in `folder` listed in its manifest."""
    manifest = _read_manifest(folder)
    return list(manifest["files"]) if manifest else []


def _member_digest(digest: bytes, member: Optional[str]) -> bytes:
    return digest if member is None else hashlib.sha256(digest + member.encode()).digest()


def _check_unchanged(before: dict[str, Identity],
                     read_as: Optional[dict[str, Identity]] = None) -> None:  # fmt: skip
    """Every input is as the run found it: not written meanwhile, even with its size and
    mtime put back (cp -p, rsync -a, touch -r), nor replaced. `read_as`: the files that
    their readers checked once read (file_identity), not looked at again (50,311 small
    files: 0.2 s of stats once the workers were done). A reader's that differs is
    checked by a stat here: a worker on another node may see the file through a mount
    that numbers inodes itself (sshfs, gcsfuse, an S3 mount), and a write since the
    listing shows here too (a ctime is never put back)."""
    read_as = read_as or {}
    for path, identity in before.items():
        if read_as.get(path) != identity and file_identity(_stat(path)) != identity:
            raise changed_while_read(path)


def corpus_name(files: list[InputFile], source: Optional[Source] = None) -> str:
    """The corpus as errors name it: its file, or a download's URL (the cache's copy is a
    path the user never gave), or the count of files and the first."""
    if len(files) != 1:
        return f"{len(files)} files ({files[0].name}, ...)"
    url = getattr(source, "url", None)  # (the error line hides a URL's secrets)
    if isinstance(url, str):
        return f"{url}!{files[0].member}" if files[0].member else url
    return files[0].name


def _progress(results: Iterable, shards: list[Shard], what: str, quiet: bool) -> Iterator:
    """On a terminal, a bar in bytes of input (MB/s, ETA) with documents/s and tokens/s;
    nothing otherwise (not even tqdm's import)."""
    if not shown(quiet):
        yield from results
        return
    docs = tokens = 0
    with Bar(what, sum(s.nbytes for s in shards), show=True) as bar:  # drawn before shard 1
        for count, (shard, result) in enumerate(zip(shards, results), 1):
            docs += result.docs  # scan and encode results both count documents
            tokens += getattr(result, "tokens", 0)  # only encode results count tokens
            elapsed = max(bar.elapsed, 1e-9)
            rates = f"{count}/{len(shards)} shards, {docs / elapsed:,.0f} docs/s" + (
                f", {tokens / elapsed:,.0f} tok/s" if tokens else "")  # fmt: skip
            bar.note(rates)
            bar.update(shard.nbytes)
            yield result


class Meanwhile:
    """A job of the driver's run in a thread while the workers run, instead of before
    them (file reads and hashlib release the GIL). It starts once the first result is in
    (the pool has forked its workers by then), or when start() is called."""

    def __init__(self, job: Callable[[], Any]) -> None:
        self._job, self._thread = job, None
        self._outcome: list[Any] = []

    def once_started(self, results: Iterable[Any]) -> Iterator[Any]:
        for result in results:
            yield result
            self.start()
        self.start()

    def result(self) -> Any:
        self.start()  # no result came (nothing to run): the job runs now
        self._thread.join()
        value, error = self._outcome
        if error is not None:
            raise error
        return value

    def start(self) -> None:
        """Now (no pool to fork first)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome[:] = [self._job(), None]
        except BaseException as e:  # raised where the result is asked for
            self._outcome[:] = [None, e]


class DigestWhileWriting:
    """The sha256 of the files that shards write in place (one text split by position),
    taken while the workers encode (a GrowingDigest per file): whatever lies before the
    first unfinished shard of a file is final. The commit then does not read them again."""

    def __init__(self, tasks: list[EncodeTask], itemsize: int, out: OutputWriter) -> None:
        self._starts: dict[Path, list[tuple[int, int]]] = {}  # (shard, first byte), in order
        for task in sorted(tasks, key=lambda t: t.shard.index):
            for target in (task.train, task.val):
                if target is not None:
                    self._starts.setdefault(Path(target.path), []).append(
                        (task.shard.index, target.position * itemsize)
                    )
        self._sizes = {path: path.stat().st_size for path in self._starts}
        self._first_unfinished = dict.fromkeys(self._starts, 0)  # index into its starts
        self._finished: set[int] = set()
        self._digests = {path: GrowingDigest(out, path) for path in self._starts}

    def following(self, results: Iterable[Any], tasks: list[EncodeTask]) -> Iterator[Any]:
        """The results (of `tasks`, in that order), passed through as each file's hashing
        moves on (from the first result: the workers have forked by then)."""
        with ExitStack() as digests:  # to the seal at the end; stopped on an error
            for digest in self._digests.values():
                digests.enter_context(digest)
            for task, result in zip(tasks, results):
                self._finished.add(task.shard.index)
                for path, starts in self._starts.items():
                    k = was = self._first_unfinished[path]
                    while k < len(starts) and starts[k][0] in self._finished:
                        k += 1
                    if k > was:  # all before shard k's first byte is final
                        self._first_unfinished[path] = k
                        self._digests[path].grew(starts[k][1] if k < len(starts) else
                                                 self._sizes[path])  # fmt: skip
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


def _side_keys(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit keys of each side's documents (one stream's: split by run.val_docs)."""
    train = np.concatenate([r.train_keys for r in run.results])
    val = np.concatenate([r.val_keys for r in run.results])
    if run.split_by == "document":
        return train[~run.val_docs], train[run.val_docs]
    return train, val


def keys_in(keys: np.ndarray, others: np.ndarray) -> int:
    """How many of `keys` are among `others` (np.isin's count, without its first call's
    17 ms of set-up)."""
    if not len(keys) or not len(others):
        return 0
    others = np.sort(others)
    at = np.minimum(np.searchsorted(others, keys), len(others) - 1)
    return int((others[at] == keys).sum())


def _manifest(run: Run) -> dict[str, Any]:
    from corpusprep.compose_cache import hydra_version
    from corpusprep.redact import redact_override, redact_text, redact_values

    settings, files = run.settings, run.files
    train, val = run.merged.tokens["train"], run.merged.tokens["val"]
    chars = run.chars
    listed = [  # a URL's user:password or ?token= is never written (a path is the one text)
        {"path": redact_text(real), **({"member": redact_text(f.member)} if f.member else {}),
         "format": f.format, "compression": f.compression, "bytes": run.before[f.path].size,
         "sha256": run.hashes[f.path].hex()}  # of the file on disk (a zip: the archive)
        for f, real in zip(files, run.source.real_paths([f.path for f in files]))
    ]  # fmt: skip
    sha256 = input_sha256(files, run.hashes)
    train_keys, val_keys = _side_keys(run)
    split: dict[str, Any] = {"by": run.split_by, "fraction": settings.split}
    if run.split_by == "position":
        split.update(train_chars=run.split_char, val_chars=chars - run.split_char)
    elif run.split_by in ("document", "hash"):
        split["seed"] = settings.seed
    if settings.val_size is not None:
        split["val_size"] = settings.val_size
    manifest: dict[str, Any] = {
        "corpusprep": corpusprep.__version__,
        "fingerprint": fingerprint(run, sha256, run.tokenizer.max_id),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "name": run.cfg.get("name"),
        "source": {
            **redact_values(run.source.describe()),
            "file": listed[0]["path"],
            "bytes": sum(run.before[p].size for p in {f.path for f in files}),
            "sha256": sha256,
            "files": listed,
        },
        "tokenizer": run.tokenizer.describe(),
        "vocab_size": run.tokenizer.vocab_size,
        "dtype": run.dtype,
        "split": split,
        "order": {"kind": settings.order, **({"seed": settings.seed} if run.order else {})},
        "eot": {"mode": run.eot, "id": run.eot_id},
        "chars": chars,
        "documents": {
            "total": run.docs,
            "train": run.merged.docs["train"],
            "val": run.merged.docs["val"],
            "skipped_invalid": run.skipped,
            "exact_duplicates_across_splits": keys_in(val_keys, train_keys),
        },
        "tokens": {"train": train, "val": val},
        "chars_per_token": round(chars / (train + val), 4),
        **run.stats,  # val_bytes, bytes_per_token (val), vocab_used
        "shards": {
            "count": len(run.shards),
            "shard_bytes": settings.shard_bytes,
            "plan_sha256": plan_digest(run.shards),
        },  # fmt: skip
        "executor": run.executor.describe(),
        "config": _redacted_config(run.cfg),
        "overrides": [redact_override(o) for o in run.overrides],
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "hydra": hydra_version(),
        },  # fmt: skip
        "format": run.exporter.describe(),
    }
    if run.split_by not in ("document", "hash"):
        manifest["documents"].pop("exact_duplicates_across_splits")
    note = run.exporter.note(run.dtype)  # what the format's loaders need of these ids
    if note is not None:
        manifest["note"] = note
    if run.dtype != "uint16" and manifest["format"].get("kind") == "nanogpt":
        manifest["nanogpt_note"] = (
            f"ids are {run.dtype}; nanoGPT's stock train.py reads uint16: change "
            f"np.memmap(..., dtype=np.uint16, ...) in get_batch to dtype=np.{run.dtype}"
        )
    return manifest

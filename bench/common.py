"""What bench_char.py and bench_bpe.py share: the corpus, the measuring, the output check,
the table and the run loop. Each script only says which commands to compare.

Imported as `common`: Python puts the running script's folder (bench/) on sys.path.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
NANOGPT = REPO / "tests" / "nanogpt_reference.py"
MB = 1_000_000  # decimal megabytes, for corpus sizes and MB/s alike

SAMPLE_SECONDS = 0.005  # how often the RSS of the process tree is read
# Finding descendants means reading /proc/*/stat for every process (~0.5 ms here, and this
# kernel has no /proc/<pid>/task/*/children). Doing it on every sample would take ~10% of a
# core away from the benchmark on a 2-core machine; pool workers live for the whole run, so
# looking for new ones every 5th sample (~25 ms) misses nothing that matters.
RESCAN_EVERY = 5


# --- the corpus ------------------------------------------------------------------------------


def stdlib_sources() -> list[Path]:
    """This Python's standard library .py files that are valid UTF-8, in sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.relative_to(root).parts:
            continue  # installed packages differ between machines; the stdlib does not
        try:
            path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a few test files are latin-1 on purpose; nanoGPT would reject them
        files.append(path)
    if not files:
        sys.exit(f"no UTF-8 .py files under {root}")
    return files


CORPORA = ("uneven", "even", "words")  # --corpus: what the benchmark text is made of


def _site_sources() -> list[Path]:
    """The .py files of the installed packages (site-packages), valid UTF-8, sorted."""
    root = Path(sysconfig.get_paths()["purelib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        try:
            path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        files.append(path)
    return files


def _data_documents() -> list[bytes]:
    """Data files, from a fixed seed: a CSV table, and JSON on one line of 400 KB (no safe
    place to cut it for BPE: it is encoded whole)."""
    import random

    rng = random.Random(0)
    csv = "".join(f"{i},{rng.random():.6f},{rng.randint(0, 10**9)},item-{rng.randint(0, 999)}\n"
                  for i in range(20_000))  # fmt: skip
    record = {
        "values": [rng.randint(0, 10**6) for _ in range(40_000)],
        "names": ["".join(rng.choices("abcdefghij", k=8)) for _ in range(10_000)],
    }
    return [csv.encode(), json.dumps(record, separators=(",", ":")).encode()]


def _prose_documents() -> list[bytes]:
    """Prose: tiny shakespeare (bundled with corpusprep) in its 40 acts-sized pieces."""
    import lzma

    text = lzma.decompress((REPO / "corpusprep/data/tinyshakespeare.txt.xz").read_bytes())
    step = len(text) // 40
    return [text[i : i + step] for i in range(0, len(text), step)]


def corpus_documents(kind: str) -> list:
    """The corpus's documents, in order: paths (read when needed) or bytes.
    even: the standard library alone (code that tokenizes evenly, a flattering corpus);
    uneven: the standard library and site-packages interleaved (code of very different
    styles), with prose and data files between them: shards of very different cost."""
    if kind == "words":  # text8's shape: the uneven corpus as lowercase words, one line
        return [_Words(item) for item in corpus_documents("uneven")]
    code: list = stdlib_sources()
    if kind == "even":
        return code
    extra = _site_sources()
    mixed: list = []
    for i in range(max(len(code), len(extra))):
        mixed += [x[i] for x in (code, extra) if i < len(x)]
    specials = _prose_documents() + _data_documents()
    every = max(1, len(mixed) // len(specials))
    out: list = []
    for i, item in enumerate(mixed):
        out.append(item)
        if i % every == every - 1 and specials:
            out.append(specials.pop(0))
    return out + specials


class _Words:
    """A document as text8 has its text (enwik8 cleaned): lowercase a-z words, each
    followed by one space, nothing else; read when needed."""

    def __init__(self, item) -> None:
        self.item = item

    def read_bytes(self) -> bytes:
        words = re.sub(rb"[^a-z]+", b" ", read_document(self.item).lower()).strip()
        return words + b" " if words else b""


def read_document(item) -> bytes:
    return item if isinstance(item, bytes) else item.read_bytes()


def utf8_prefix(data: bytes, n: int) -> int:
    """The largest length <= n at which `data` can be cut without splitting a character."""
    while 0 < n < len(data) and (data[n] & 0xC0) == 0x80:  # a continuation byte
        n -= 1
    return n


def corpus_pieces(files: list, target: int) -> Iterator[bytes]:
    """The files' bytes, concatenated and repeated up to `target` bytes, trimmed to a
    character boundary. One file at a time, never the whole text: whatever this process
    holds raises its own peak RSS, which Linux passes on to the ru_maxrss of the children
    it starts (see run_measured)."""
    left = target
    while left > 0:
        for item in files:
            data = read_document(item)
            if len(data) >= left:
                yield data[: utf8_prefix(data, left)]
                return
            yield data
            left -= len(data)


def ensure_corpus(path: Path, target: int, kind: str = "uneven") -> tuple[int, bool]:
    """Write the corpus unless `path` already holds one of exactly the right size.
    Returns (size, reused)."""
    files = corpus_documents(kind)
    size = sum(len(piece) for piece in corpus_pieces(files, target))  # page cache: fast
    if path.is_file() and path.stat().st_size == size:
        return size, True
    partial = path.with_name(path.name + ".partial")  # an interrupted write is never reused
    with open(partial, "wb") as f:
        for piece in corpus_pieces(files, target):
            f.write(piece)
    partial.replace(path)
    return size, False


# --- measuring one process tree --------------------------------------------------------------


def descendants(root: int) -> set[int]:
    """`root` and every process below it, from the parent pid in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited while we looked
        # the command name (field 2) may contain spaces and ")": parse from the last ")"
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    return tree


def vm_rss(pid: int) -> int:
    """VmRSS of `pid` in bytes; 0 once it has exited (a zombie has no VmRSS line)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pss(pid: int) -> int:
    """Pss of `pid` in bytes (shared pages divided among the processes sharing them), 0 if
    gone. Summed over a tree, this is the memory the tree really holds."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeRssSampler(threading.Thread):
    """Samples the summed RSS of a process and its descendants until stop(); keeps the max.

    The sum over-counts: pool workers are forked, and pages they still share with the
    parent (the interpreter, imported modules) are counted once per process.
    """

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_sum = 0
        self.peak_pss = 0
        self.max_processes = 0
        self._stopping = threading.Event()

    def run(self) -> None:
        tree = {self.root}
        sample = 0
        while not self._stopping.is_set():
            if sample % RESCAN_EVERY == 0:
                tree = descendants(self.root)
            total = sum(vm_rss(pid) for pid in tree)
            self.peak_sum = max(self.peak_sum, total)
            if sample % 2 == 0:  # smaps_rollup costs more to read than status
                self.peak_pss = max(self.peak_pss, sum(pss(pid) for pid in tree))
            self.max_processes = max(self.max_processes, len(tree))
            sample += 1
            self._stopping.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self._stopping.set()
        self.join()


@dataclass
class Run:
    seconds: float
    peak_tree_rss: int  # bytes: max over samples of the sum of VmRSS over the process tree
    peak_tree_pss: int  # bytes: the same for Pss (shared pages counted once in all)
    max_single_rss: int  # bytes: ru_maxrss of the largest single process in the tree
    processes: int  # most processes seen in the tree at once
    timed: bool = True  # False: the memory run, sampled, whose time does not count


def user_env() -> dict[str, str]:
    """This process's environment as it is now (a script may have set variables, such
    as HF_DATASETS_CACHE), with bytecode cached as on a user's machine: an environment
    that sets PYTHONDONTWRITEBYTECODE (a sandbox, a container) otherwise compiles every
    module of an editable install on every run (0.07 s of corpusprep's start-up here)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def settle() -> None:
    """Write out every dirty page before a timed run: otherwise the kernel flushes the files
    the run before wrote (a peer's outputs, the corpus) while this one runs, on its cores."""
    os.sync()


def run_measured(cmd: list[str], cwd: Path, log: Path, sample: bool = True) -> Run:
    """Run `cmd` to completion, timing it and (if `sample`) sampling its memory; exit 1 if
    it fails. A sampled run is slower: reading smaps_rollup every few ms takes each
    process's memory-map lock, so timed runs are not sampled (see run_all)."""
    settle()
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=user_env())
        sampler = TreeRssSampler(proc.pid)
        if sample:
            sampler.start()
        # wait4 gives this child's own rusage (getrusage(RUSAGE_CHILDREN) would add up every
        # run so far). Its ru_maxrss is the max over the child and the descendants it reaped,
        # i.e. the largest single process of the tree, in KiB on Linux.
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if sample:
            sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)  # we reaped it, not Popen
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        print(f"\nFAILED (exit {proc.returncode}): {' '.join(cmd)}", file=sys.stderr)
        print("\n".join(f"  | {line}" for line in tail), file=sys.stderr)
        sys.exit(1)
    return Run(seconds, sampler.peak_sum, sampler.peak_pss, usage.ru_maxrss * 1024,
               sampler.max_processes, timed=not sample)  # fmt: skip


# --- checking the outputs --------------------------------------------------------------------


def first_difference(a: Path, b: Path, chunk: int = 1 << 20) -> Optional[int]:
    """The offset of the first differing byte of two files, or None if they are identical."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        offset = 0
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return offset + next(
                    (i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y))
                )
            if not x:
                return None
            offset += len(x)


def output_differences(expected: Path, actual: Path, names: Sequence[str]) -> list[str]:
    """What differs between the files `names` of two output folders; empty if nothing."""
    problems = []
    for name in names:
        a, b = expected / name, actual / name
        if not a.is_file() or not b.is_file():
            missing = ", ".join(str(p) for p in (a, b) if not p.is_file())
            problems.append(f"{name}: missing ({missing})")
            continue
        at = first_difference(a, b)
        if at is not None:
            sizes = f"{a.stat().st_size:,} vs {b.stat().st_size:,} bytes"
            problems.append(f"{name}: differs from byte {at:,} on ({sizes})")
    return problems


# --- the report ------------------------------------------------------------------------------


def print_table(size: int, runs: dict[str, list[Run]]) -> dict[str, float]:
    """One row per method: the median time of the repeats, highest memory seen in any."""
    header = (
        f"{'method':<11} {'median s':>8} {'MB/s':>7} {'peak PSS, tree':>15} "
        f"{'peak RSS, tree sum':>19} {'max 1-process RSS':>18} {'procs':>5}   all runs (s)"
    )
    print(header)
    print("-" * len(header))
    best = {}
    for name, rs in runs.items():
        timed = [r for r in rs if r.timed] or rs
        best[name] = statistics.median(r.seconds for r in timed)
        tree = max(r.peak_tree_rss for r in rs) / MB
        tree_pss = max(r.peak_tree_pss for r in rs) / MB
        single = max(r.max_single_rss for r in rs) / MB
        procs = max(r.processes for r in rs)
        times = ", ".join(f"{r.seconds:.2f}" for r in timed)
        print(
            f"{name:<11} {best[name]:>8.2f} {size / MB / best[name]:>7.1f} "
            f"{tree_pss:>12,.0f} MB {tree:>16,.0f} MB {single:>15,.0f} MB {procs:>5}   {times}"
        )
    return best


def corpusprep_phases(out_dir: Path) -> str:
    """corpusprep's own timings from its manifest: what is left of the wall time is
    interpreter and Hydra start-up, writing meta.pkl/manifest.json, fsync and exit."""
    manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in manifest["seconds"].items())
    shards, workers = manifest["shards"]["count"], manifest["executor"]["workers"]
    return f"{phases}; {shards} shards, {workers} workers"


def print_memory_notes() -> None:
    """What the three memory columns mean, and the floor under the last one."""
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB
    print(
        "\npeak PSS, tree: max over 10 ms samples of the summed Pss (smaps_rollup) of the process\n"
        "  and its descendants: shared pages divided among their sharers, the memory really used.\n"
        "peak RSS, tree sum: max over 5 ms samples of the summed VmRSS of the process and its\n"
        "  descendants; over-counts pages that forked workers share with their parent.\n"
        "max 1-process RSS: ru_maxrss of the largest single process (os.wait4); never below\n"
        f"  this benchmark's own peak ({floor:,.0f} MB), which Linux carries into a child's\n"
        "  ru_maxrss when it starts it."
    )


# --- the run: arguments, workdir, alternating repeats ----------------------------------------


def parse_args(
    description: str, default_mb: int, argv: Optional[list[str]] = None,
    more: Optional[Callable[[argparse.ArgumentParser], None]] = None,
) -> argparse.Namespace:  # fmt: skip
    """The options every script takes; `more` adds a script's own."""
    parser = argparse.ArgumentParser(description=description)
    if more is not None:
        more(parser)
    parser.add_argument(
        "--mb", type=int, default=default_mb, help="corpus size in MB (10**6 bytes)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per method; the median counts")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the corpus and outputs go (default: a new temporary folder under /tmp); "
        "a corpus of the right size already there is reused",
    )
    parser.add_argument("--keep", action="store_true", help="keep the corpus and the outputs")
    parser.add_argument("--corpus", choices=CORPORA, default="uneven",
                        help="uneven (default): code of two kinds, prose and data files; "
                        "even: the standard library alone; words: the uneven corpus as "
                        "text8 has its text, lowercase words and single spaces, one "
                        "line")  # fmt: skip
    args = parser.parse_args(argv)
    if args.mb < 1 or args.repeat < 1:
        parser.error("--mb and --repeat must be at least 1")
    return args


def open_workdir(chosen: Optional[Path]) -> tuple[Path, bool]:
    """The folder for the corpus, outputs and logs; (path, temporary). corpusprep's
    records of composed configs start empty there, so that each command's first run
    composes with Hydra as a new command does (the later runs read the record, as a
    repeated command does: docs/keys.md#a-repeated-command-skips-hydra)."""
    if chosen is None:
        workdir, temporary = Path(tempfile.mkdtemp(prefix="corpusprep-bench-", dir="/tmp")), True
    else:
        workdir, temporary = chosen.resolve(), False
        workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "compose", ignore_errors=True)
    os.environ["CORPUSPREP_COMPOSE_CACHE"] = str(workdir / "compose")
    return workdir, temporary


def corpusprep_origin(cwd: Path) -> str:
    """Which corpusprep `python -m corpusprep` imports when run from `cwd`. A non-editable
    install is a copy taken when it was installed, not this checkout: say so in the header."""
    find = "import importlib.util as u; print(u.find_spec('corpusprep').origin)"
    found = subprocess.run(
        [sys.executable, "-c", find], cwd=cwd, capture_output=True, text=True, check=False
    )
    if found.returncode != 0 or not found.stdout.strip():
        return "not importable"  # the runs will fail and show why
    package = Path(found.stdout.strip()).parent
    where = "this checkout" if package == REPO / "corpusprep" else "an installed copy"
    return f"{package} ({where})"


def prepare_corpus(
    workdir: Path, mb: int, repeat: int, extra: Sequence[str] = (), kind: str = "uneven"
) -> tuple[Path, int]:
    """Build (or reuse) the corpus in `workdir` and print what the run is about, with any
    `extra` lines a script adds."""
    corpus = workdir / f"{kind}-{mb}mb.txt"
    t = time.perf_counter()
    size, reused = ensure_corpus(corpus, mb * MB, kind)
    how = "reused" if reused else f"built in {time.perf_counter() - t:.1f} s"
    print(f"python     {sys.executable} ({sys.version.split()[0]})")
    print(f"corpusprep {corpusprep_origin(workdir)}")
    print(f"machine    {os.cpu_count()} cores")
    print(f"corpus     {corpus} ({size:,} bytes, {how})")
    print(f"repeat     {repeat} (the median time counts)")
    print("".join(f"{line}\n" for line in extra))
    return corpus, size


def run_all(
    commands: dict[str, list[str]],
    outs: dict[str, Path],
    workdir: Path,
    repeat: int,
    compared: Sequence[str],
    ceilings: Optional[Ceilings] = None,
) -> Optional[dict[str, list[Run]]]:
    """Run every command `repeat` times, timed, then once more with its memory sampled (the
    sampler slows a run, so that run's time does not count), and check after each round
    that the files `compared` are the same in every output folder as in the first one.
    After each timed run of a method with a ceiling, its ceiling is measured. None if the
    files differ."""
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    reference, *others = commands
    for i in range(1, repeat + 2):
        sample = i == repeat + 1
        # alternate the methods, so slow drift (page cache, thermals) hits both alike
        for name, cmd in commands.items():
            # start empty: stale files from an earlier run must not pass the identity check
            shutil.rmtree(outs[name], ignore_errors=True)
            run = run_measured(cmd, workdir, workdir / f"{name}.log", sample)
            runs[name].append(run)
            what = (
                f"memory run, {run.seconds:6.2f} s (not counted): tree PSS "
                f"{run.peak_tree_pss / MB:,.0f} MB"
                if sample
                else f"{run.seconds:6.2f} s"
            )
            print(f"run {min(i, repeat)}/{repeat}  {name:<11} {what}  single "
                  f"{run.max_single_rss / MB:6,.0f} MB")  # fmt: skip
            if ceilings is not None and not sample:
                ceilings.after(name, run, i)
        for other in others:
            problems = output_differences(outs[reference], outs[other], compared)
            if problems:
                print(f"\nOUTPUTS DIFFER (kept in {workdir}):", file=sys.stderr)
                print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
                return None
    if compared:  # else the script checks its outputs its own way
        print(f"\noutputs identical: {', '.join(compared)}")
    print("(corpusprep's run 1 of a command composes its config with Hydra; runs 2 on read "
          "the config that run kept, as a repeated command does)\n")  # fmt: skip
    return runs


def clean_up(workdir: Path, temporary: bool, keep: bool, outs: dict[str, Path]) -> None:
    if keep:
        print(f"\nkept: {workdir}")
    elif temporary:
        shutil.rmtree(workdir)
    else:  # a chosen workdir keeps its corpus, so the next run can reuse it
        for out in outs.values():
            shutil.rmtree(out, ignore_errors=True)


# --- the encoder's ceiling and the targets ----------------------------------------------------


def measure_ceiling(encoder: str, workers: int, inputs: Sequence[Path], documents: bool) -> float:
    """Seconds the encoder alone takes (one run of bench/ceiling.py); nan if it failed."""
    kind = "--jsonl" if documents else "--text"
    if len(inputs) == 1 and Path(inputs[0]).is_dir():  # a folder of text files (bench_files)
        kind = "--files"
    cmd = [sys.executable, str(REPO / "bench" / "ceiling.py"), encoder, str(workers), kind,
           *map(str, inputs)]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    settle()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        print(f"ceiling {encoder}: FAILED: {done.stderr.strip()[-300:]}")
        return float("nan")
    return json.loads(done.stdout)["seconds"]


def measure_sha256(paths: Sequence[Path]) -> float:
    """Seconds one core takes to sha256 these files with corpusprep's own function."""
    from corpusprep.writer import file_sha256

    files = [
        f for p in paths for f in (sorted(Path(p).rglob("*.txt")) if Path(p).is_dir() else [p])
    ]
    start = time.perf_counter()
    for path in files:
        file_sha256(path)
    return time.perf_counter() - start


def document_texts(path: Path, loads: Callable[[bytes], Any] = json.loads) -> Iterator[str]:
    """The documents' texts of a bench corpus file, in order: JSON Lines in zstd (each
    line parsed with `loads`), or Parquet (its text column, read with pyarrow in batches,
    as corpusprep's reader does)."""
    if str(path).endswith(".parquet"):
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(1024, columns=["text"]):
            yield from batch.column(0).to_pylist()
        return
    import zstandard

    with open(path, "rb") as raw:
        stream = zstandard.ZstdDecompressor().stream_reader(raw)
        for line in io.BufferedReader(stream, 1 << 20):
            if line.strip():
                yield loads(line)["text"]


def measure_reading(paths: Sequence[Path]) -> float:
    """Seconds one core takes to read the documents of these inputs with the libraries
    corpusprep's reader uses and nothing else: each .jsonl.zst file decompressed
    (zstandard) and every line parsed for its "text" (orjson where installed, as
    corpusprep's reader); each Parquet file's text column read by pyarrow; each .txt file
    of a folder read and decoded. Work the encoder's ceiling leaves out (it starts from
    the texts in memory) and that no reader can."""
    try:
        from orjson import loads
    except ImportError:
        loads = json.loads
    start = time.perf_counter()
    for path in paths:
        if Path(path).is_dir():
            for file in sorted(Path(path).rglob("*.txt")):
                file.read_bytes().decode("utf-8")
            continue
        for _ in document_texts(path, loads):
            pass
    return time.perf_counter() - start


class Ceilings:
    """The encoder's ceiling for each corpusprep method, measured right after each timed
    run of that method: this machine's speed drifts by a third over a benchmark, and a
    ceiling measured minutes after the runs it is compared with moved a fraction by 20
    points. Each method's encoder and workers are read from the manifest its run left
    (`encoder` fixes the encoder instead); one that two methods share is measured once a
    round. The median over the rounds counts, as for the runs (a round whose ceiling
    failed makes it nan). Each run's time outside corpusprep's own clock (its wall time
    less its manifest's seconds.total) is kept too, and how long one core takes to sha256
    its input and the output files its manifest lists (docs/safety.md: the manifest
    records both), measured right after it: work inside the clock that is neither the
    encoder nor anything around it that could go."""

    def __init__(self, inputs: Sequence[Path], documents: bool,
                 methods: dict[str, tuple[Path, Optional[str]]]) -> None:  # fmt: skip
        self.inputs, self.documents, self.methods = inputs, documents, methods
        self.times: dict[str, list[float]] = {name: [] for name in methods}
        self.outside: dict[str, list[float]] = {name: [] for name in methods}
        self.hashing: dict[str, list[float]] = {name: [] for name in methods}
        # documents: one core's time to read them (decompress, parse), once a round
        self.reading: dict[int, float] = {}
        self.workers: dict[str, int] = {}
        self.encoders: dict[str, str] = {}
        self._measured: dict[tuple[int, str, int], float] = {}  # (round, encoder, workers)

    def after(self, name: str, run: Run, round_number: int) -> None:
        """After a timed run of method `name` (nothing for a method without a ceiling)."""
        if name not in self.methods:
            return
        out_dir, encoder = self.methods[name]
        manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
        encoder = encoder or manifest["tokenizer"]["backend"]
        workers = manifest["executor"]["workers"]
        key = (round_number, encoder, workers)
        if key not in self._measured:
            self._measured[key] = measure_ceiling(encoder, workers, self.inputs, self.documents)
            shown = encoder.split("=", 1)[0]  # sentencepiece=MODEL: its path left out
            print(f"ceiling    {shown:<11} {self._measured[key]:6.2f} s  (the encoder alone, "
                  f"{workers} workers)")  # fmt: skip
        self.times[name].append(self._measured[key])
        self.outside[name].append(run.seconds - manifest["seconds"]["total"])
        outputs = [out_dir / file for file in manifest.get("files", {})]
        self.hashing[name].append(measure_sha256([*self.inputs, *outputs]))
        if self.documents and round_number not in self.reading:
            self.reading[round_number] = measure_reading(self.inputs)
        self.encoders[name] = encoder
        self.workers[name] = workers

    def seconds(self, name: str) -> float:
        times = self.times[name]
        return float("nan") if any(math.isnan(t) for t in times) else statistics.median(times)

    def outside_seconds(self, name: str) -> float:
        return statistics.median(self.outside[name])

    def reading_seconds(self) -> Optional[float]:
        """One core's time to read the documents (median of the rounds); None: one text."""
        return statistics.median(self.reading.values()) if self.reading else None

    def sha256_seconds(self, name: str) -> float:
        """One core's time to sha256 the input and outputs (median of the rounds)."""
        return statistics.median(self.hashing[name])


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report_ceiling(label: str, corpusprep_seconds: float, ceilings: Ceilings, name: str,
                   target: float = 0.85) -> None:  # fmt: skip
    """corpusprep's whole-process throughput as a fraction of the encoder's ceiling; then
    what bounds it besides the encoder: the time its timed runs spent outside corpusprep's
    own clock (the interpreter, imports, Hydra's compose, the exit), the ceiling's fraction
    of the time inside, and the sha256 of the input and outputs that the manifest records
    (one core's time; it shares the cores with the workers, so it costs the run about
    that over the workers); then the most the whole process could reach with nothing but
    the encoder, the start-up and the sha256 (a target above it is out of reach without a
    faster start-up or a cheaper checksum), unless they add up to more than the run took
    (a ceiling measured while the machine was slower), and bound nothing. For documents a
    third line adds reading them (decompressing, parsing), which the ceiling leaves out
    and every method must do."""
    ceiling = ceilings.seconds(name)
    fraction = ceiling / corpusprep_seconds
    print(f"target: {label}: >= {target:.0%} of the encoder's in-process ceiling "
          f"({ceiling:.2f} s for the encoder alone, {corpusprep_seconds:.2f} s whole "
          f"process): {fraction:.0%}, {verdict(fraction >= target)}")  # fmt: skip
    outside = ceilings.outside_seconds(name)
    sha256, workers = ceilings.sha256_seconds(name), ceilings.workers[name]
    cap = ceiling / (ceiling + outside + sha256 / workers)
    beyond = (
        f": {target:.0%} is out of reach without a faster start-up or sha256"
        if cap < target
        else ""
    )
    inside = corpusprep_seconds - outside
    # the three add up to more than the run took (the machine was slower while the
    # ceiling ran): they bound nothing
    bound = (f"with nothing but the encoder, start-up and sha256, the whole process would "
             f"reach {cap:.0%}{beyond}" if not cap < fraction else  # nan: a failed ceiling
             "together they come to more than the run took: they bound nothing here")  # fmt: skip
    print(f"  {label}: {outside:.2f} s outside corpusprep's own clock (start-up, imports, "
          f"compose, the manifest's write, exit; median of the timed runs), so the ceiling is "
          f"{ceiling / inside:.0%} of the time inside; the sha256 of the input and outputs "
          f"takes {sha256:.2f} s of a core, {sha256 / workers:.2f} s of {workers} cores; "
          f"{bound}")  # fmt: skip
    reading = ceilings.reading_seconds()
    if reading is not None:  # documents: reading them is work no method can leave out
        cap = ceiling / (ceiling + outside + (sha256 + reading) / workers)
        beyond = f": {target:.0%} is out of reach" if cap < target else ""
        bound = (f"with nothing but the encoder, start-up, sha256 and reading, the whole "
                 f"process would reach {cap:.0%}{beyond}" if not cap < fraction else
                 "with them, more than the run took: they bound nothing here")  # fmt: skip
        print(f"  {label}: reading the documents (decompressing and parsing, as corpusprep's "
              f"reader does) takes {reading:.2f} s of a core, {reading / workers:.2f} s of "
              f"{workers} cores, which the encoder's ceiling leaves out; {bound}")  # fmt: skip


def paired(peer: Sequence[Run], ours: Sequence[Run]) -> list[float]:
    """The peer's time over ours, round by round (timed runs only: the n-th of each ran in
    the same round, minutes apart at most)."""
    timed = [[r.seconds for r in runs if r.timed] for runs in (peer, ours)]
    return [theirs / mine for theirs, mine in zip(*timed)]


def report_ratio(label: str, ratio: float, target: float,
                 reach: Optional[tuple[float, float]] = None,
                 pairs: Optional[Sequence[float]] = None) -> None:  # fmt: skip
    """A throughput target. reach: (the peer's seconds, the encoder's ceiling in seconds):
    then the line also says how long the target leaves corpusprep, against what the
    encoder alone takes on the same input (a target under it cannot be met by anything
    around the encoder). pairs: the ratio round by round (paired()), said on a line of its
    own; the verdict stays the ratio of the medians."""
    note = ""
    if reach is not None:
        allowed, ceiling = reach[0] / target, reach[1]
        if allowed < ceiling:
            note = (f" (needs {allowed:.2f} s: under the {ceiling:.2f} s the encoder alone "
                    "takes, so out of reach around this encoder)")  # fmt: skip
        else:
            left = allowed - ceiling
            note = (f" (needs {allowed:.2f} s: the encoder alone takes {ceiling:.2f} s, "
                    f"leaving {left:.2f} s for start-up, reading and writing)")  # fmt: skip
    print(f"target: {label}: >= {target:g}x: {ratio:.2f}x, {verdict(ratio >= target)}{note}")
    if pairs:
        each = ", ".join(f"{r:.2f}x" for r in pairs)
        print(f"  {label}: round by round (each run against the peer's run of its round): "
              f"{each}; median {statistics.median(pairs):.2f}x")  # fmt: skip


def report_memory(label: str, runs: Sequence[Run], limit: int) -> None:
    pss = max(r.peak_tree_pss for r in runs)
    print(f"target: {label}: peak memory (PSS, tree) < {limit / MB:,.0f} MB: {pss / MB:,.0f} MB, "
          f"{verdict(pss < limit)}")  # fmt: skip

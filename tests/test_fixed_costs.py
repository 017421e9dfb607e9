"""What every run pays around the encoder (issue 13): the process's end without Python's
teardown, the input's sha256 while the workers encode, a compressed file's size guessed
from its start (where its pieces start), and the outputs' sha256 while they are written."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import json
import lzma
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import zstandard
from conftest import shared_data_dir
from helpers import run_cli

from corpusprep.compression import GUESSED_RATIO, SAMPLE_TEXT, text_size
from corpusprep.formats import MAX_PIECES, STREAM_END, InputFile, compressed_pieces
from corpusprep.writer import hidden_name


def temp_of(*names: str) -> tuple[str, ...]:
    """How the temporary files of `names` begin (their names hold no part of the final one)."""
    return tuple(hidden_name(name, "")[: -len(".tmp")] for name in names)


def shakespeare_file() -> Path:
    return shared_data_dir() / "tinyshakespeare" / "input.txt"


# --- the start of the process -----------------------------------------------------------

# a Ctrl-C that lands while Python imports OmegaConf (the command line's first ~0.1 s)
_CTRL_C_AT_IMPORT = """
import sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "omegaconf":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
"""


def test_import_corpusprep_is_light():
    """`import corpusprep` (for corpusprep.load) imports neither OmegaConf, Hydra nor
    numpy: they come with what uses them."""
    r = subprocess.run([sys.executable, "-c", "import sys, corpusprep\n"
                        "print([m for m in ('omegaconf', 'hydra', 'numpy') if m in sys.modules])"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "entry",
    ["import runpy; runpy.run_module('corpusprep', run_name='__main__', alter_sys=True)",
     "from corpusprep.__main__ import main; sys.exit(main())"],  # the console script's lines
    ids=["python -m corpusprep", "the corpusprep command"],
)  # fmt: skip
def test_ctrl_c_while_the_command_imports_is_one_line(tmp_path: Path, entry: str):
    code = _CTRL_C_AT_IMPORT + entry
    r = subprocess.run([sys.executable, "-c", code, "dataset=shakespeare_char"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (r.returncode, r.stderr) == (130, "corpusprep: error: interrupted\n")
    assert not (tmp_path / "data").exists()


def test_the_compose_api_resolves_corpusprep_configs_after_a_light_import(tmp_path: Path):
    """Hydra's compose API on corpusprep.conf still finds the ${cp.*} resolvers (importing
    the configs' package registers them), in a fresh interpreter."""
    code = (
        "import corpusprep\n"
        "from hydra import compose, initialize_config_module\n"
        "with initialize_config_module(version_base=None, config_module='corpusprep.conf'):\n"
        "    cfg = compose('config', overrides=['source=file', 'source.path=a/b.txt'])\n"
        "print(cfg.name, cfg.out_dir)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["b", "data/b"]


# --- the end of the process -------------------------------------------------------------


def _entry(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    """A fresh interpreter that runs `body` (given corpusprep.app as `app`), as the
    console script runs cli()."""
    code = f"import atexit, sys\nimport corpusprep.app as app\n{body}\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe: buffered
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("raised", "code", "stderr"),
    [("None", 0, ""), ("3", 3, ""), ("'a message'", 1, "a message"), ("True", 1, "")],
)
def test_cli_exits_with_the_code_python_would(tmp_path: Path, raised: str, code: int,
                                              stderr: str):  # fmt: skip
    body = (f"app.main = lambda: sys.exit({raised})\n"
            "atexit.register(lambda: print('atexit ran', flush=True))\n"
            "print('buffered', end='')\napp.cli()")  # fmt: skip
    r = _entry(tmp_path, body)
    assert r.returncode == code
    assert r.stdout == "bufferedatexit ran\n"  # unflushed output kept; atexit handlers run
    assert r.stderr.strip() == stderr


@pytest.mark.parametrize(
    "raised",
    ["KeyboardInterrupt",
     # as Python reports a Ctrl-C handled while C code called back into Python
     "SystemError('returned a result with an exception set') from KeyboardInterrupt()"],
    ids=["KeyboardInterrupt", "SystemError from it"],
)  # fmt: skip
def test_cli_says_a_ctrl_c_outside_any_run_in_one_line(tmp_path: Path, raised: str):
    """Ctrl-C while the config is composed (Hydra, the checks) or after the run ended: no
    traceback, exit 130 as for any interrupt (found by an attack)."""
    body = f"def main():\n    raise {raised}\napp.main = main\napp.cli()"
    r = _entry(tmp_path, body)
    assert r.returncode == 130
    assert r.stderr == "corpusprep: error: interrupted\n"


def test_a_ctrl_c_as_the_process_exits_ends_it_as_the_signal_does(tmp_path: Path):
    """After main() has said everything, a Ctrl-C in the exit's own steps (atexit, the
    pools' shutdown) was a KeyboardInterrupt traceback, or "ignored" and lost (exit 0)."""
    body = ("import os, signal\napp.main = lambda: None\n"
            "atexit.register(lambda: [os.kill(os.getpid(), signal.SIGINT), sum(range(10**6))])\n"
            "app.cli()")  # fmt: skip
    r = _entry(tmp_path, body)
    assert r.returncode == -signal.SIGINT
    assert "Traceback" not in r.stderr and "KeyboardInterrupt" not in r.stderr


def test_cli_waits_for_threads_that_are_not_daemons(tmp_path: Path):
    body = ("import threading, time\n"
            "def late():\n    time.sleep(0.3)\n    print('thread done', flush=True)\n"
            "app.main = lambda: threading.Thread(target=late).start()\napp.cli()")  # fmt: skip
    r = _entry(tmp_path, body)
    assert (r.returncode, r.stdout) == (0, "thread done\n")


def test_an_error_in_threadings_exit_hooks_keeps_the_code(tmp_path: Path):
    """Python 3.11's process pool can fail at exit writing to an aborted pool's wake-up
    pipe (a full disk aborts the pool): the run still ends with its own code and its one
    line, and the atexit handlers still run."""
    body = ("import threading\n"
            "def bad():\n    raise OSError(9, 'Bad file descriptor')\n"
            "def run():\n    threading._register_atexit(bad)\n"
            "    print('corpusprep: error: disk full', file=sys.stderr)\n    sys.exit(1)\n"
            "atexit.register(lambda: print('atexit ran', flush=True))\n"
            "app.main = run\napp.cli()")  # fmt: skip
    r = _entry(tmp_path, body)
    assert (r.returncode, r.stderr, r.stdout) == (1, "corpusprep: error: disk full\n",
                                                  "atexit ran\n")  # fmt: skip


def test_a_profiler_still_writes_its_report(tmp_path: Path):
    """python -m cProfile -o FILE -m corpusprep ...: the profile is written after main
    returns, so a profiled run ends the usual way."""
    text = shakespeare_file()
    r = subprocess.run([sys.executable, "-m", "cProfile", "-o", "run.prof", "-m", "corpusprep",
                        "source=file", f"source.path={text}", "out_dir=out", "quiet=true"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run.prof").stat().st_size > 0


def test_a_bug_still_ends_with_its_traceback(tmp_path: Path):
    bug = "def bug():\n    raise ZeroDivisionError('boom')\n"
    r = _entry(tmp_path, f"{bug}app.main = bug\napp.cli()")
    assert r.returncode == 1 and "ZeroDivisionError: boom" in r.stderr


def test_the_command_line_ends_as_before(tmp_path: Path):
    """Through `python -m corpusprep`: the summary reaches a pipe whole, errors keep
    their exit code, and a skipped re-run still says so."""
    text = shakespeare_file()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(shared_data_dir() / "tiktoken")}
    command = [sys.executable, "-m", "corpusprep", "source=file", f"source.path={text}",
               "out_dir=out"]  # fmt: skip
    first = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("corpusprep: input -> out") and "chars/token" in first.stdout
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert again.returncode == 0 and "is up to date" in again.stdout
    wrong = subprocess.run([*command[:3], "splt=0.8"], capture_output=True, text=True,
                           cwd=tmp_path, env=env)  # fmt: skip
    assert wrong.returncode == 1 and wrong.stderr.startswith("corpusprep: error: splt:")


# --- the input's sha256 while the workers encode ---------------------------------------


def test_meanwhile_runs_its_job_once_the_first_result_is_in():
    from corpusprep.prepare import Meanwhile

    started = []
    job = Meanwhile(lambda: started.append(threading.current_thread()) or "hashed")
    results = job.once_started(iter([1, 2, 3]))
    assert next(results) == 1 and not started  # not before the first result is handed on
    assert list(results) == [2, 3]
    assert job.result() == "hashed" and started[0] is not threading.main_thread()
    assert Meanwhile(lambda: "no results").result() == "no results"


def test_meanwhile_raises_its_jobs_error_where_the_result_is_asked():
    from corpusprep.errors import UserError
    from corpusprep.prepare import Meanwhile

    def fails():
        raise UserError("input.txt: gone")

    job = Meanwhile(fails)
    assert list(job.once_started(iter([1]))) == [1]
    with pytest.raises(UserError, match="gone"):
        job.result()


def test_the_input_sha256_is_the_files_when_hashed_in_a_thread(tmp_path: Path, tiktoken_cache):
    """One text (its hash is not needed before encoding): the manifest's sha256 is still
    the file's (a resume after a kill: tests/test_safety.py)."""
    import hashlib

    text = shakespeare_file().read_bytes()
    (tmp_path / "in.txt").write_bytes(text * 3)
    r = run_cli("source=file", "source.path=in.txt", "tokenizer=tiktoken", "shard_bytes=100000",
                "executor.workers=2", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["source"]["sha256"] == hashlib.sha256(text * 3).hexdigest()
    assert manifest["shards"]["count"] > 2


def _one_text(tmp_path: Path, copies: int = 3) -> list[str]:
    text = shakespeare_file().read_bytes()
    (tmp_path / "in.txt").write_bytes(text * copies)
    return ["source=file", f"source.path={tmp_path / 'in.txt'}", "tokenizer=tiktoken",
            "shard_bytes=100000", f"out_dir={tmp_path / 'out'}", "quiet=true"]  # fmt: skip


def test_one_texts_sha256_is_taken_while_the_workers_encode(tmp_path, monkeypatch,
                                                           tiktoken_cache):  # fmt: skip
    """BPE on one text writes resumable parts: its sha256 (0.1 s per 100 MB) is taken while
    the workers encode, not before the first shard starts, and recorded for a resume."""
    from helpers import compose

    import corpusprep.prepare as prepare_module

    seen = []
    real = prepare_module._hashes

    def hashes(files, threads):
        work = next((tmp_path / "out").glob(".corpusprep-work/*"))
        seen.append((len(list(work.glob("*.done"))), (work / "inputs.json").exists()))
        return real(files, threads)

    monkeypatch.setattr(prepare_module, "_hashes", hashes)
    manifest = prepare_module.prepare(compose(*_one_text(tmp_path), "executor.workers=2"))
    assert manifest["shards"]["count"] > 4
    assert len(seen) == 1 and seen[0][0] >= 1  # a shard was done before the hash began
    assert seen[0][1] is False  # and the record came after it
    text = (tmp_path / "in.txt").read_bytes()
    assert manifest["source"]["sha256"] == hashlib.sha256(text).hexdigest()


def test_an_input_touched_while_hashed_leaves_no_record(tmp_path: Path):
    """A record is written only if nothing changed the file since the run first looked
    at it: the same size and mtime put back (cp -p, touch -d) still leaves none."""
    from types import SimpleNamespace

    from corpusprep.formats import InputFile
    from corpusprep.writer import OutputWriter, file_identity

    path = tmp_path / "in.txt"
    path.write_bytes(b"hello\n" * 1000)
    file = InputFile(str(path), "text", size=path.stat().st_size)
    with OutputWriter(tmp_path / "out") as out:
        work = out.work("key")
        run = SimpleNamespace(
            files=[file],
            before={str(path): file_identity(os.stat(path))},
            out=out,
            cores=2,
            hashes={},
        )
        _check_recorded_only_while_untouched(run, path, work)


def _check_recorded_only_while_untouched(run, path: Path, work: Path) -> None:
    from corpusprep.prepare import INPUTS, _hash_and_record, _recorded_inputs

    digests = _hash_and_record(run)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digests[str(path)].hex() == expected
    assert _recorded_inputs(work)["sha256"] == {str(path): expected}
    (work / INPUTS).unlink()
    st = path.stat()
    path.write_bytes(b"HELLO\n" * 1000)  # other bytes, then its size and mtime put back
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    _hash_and_record(run)
    assert not (work / INPUTS).exists()


def test_a_record_taken_after_a_ctrl_c_is_not_written(tmp_path: Path):
    """The input's hash finishes in a thread; after a Ctrl-C the writer removes the work
    folder, and a record written meanwhile left the folder behind holding only it."""
    from corpusprep.prepare import INPUTS
    from corpusprep.writer import WORK, OutputWriter

    with pytest.raises(KeyboardInterrupt), OutputWriter(tmp_path / "out") as out:
        out.work("key")
        out.abort()  # what leaving the block on Ctrl-C does, with the thread still hashing
        out.write_work_file(INPUTS, b"{}")  # the thread, done a moment later
        raise KeyboardInterrupt
    assert not (tmp_path / "out" / WORK).exists()


def test_a_resume_reuses_every_finished_shard_of_one_text(tmp_path, monkeypatch, capsys,
                                                         tiktoken_cache):  # fmt: skip
    """The first shard too: it starts the text's one document but keeps no key (one text
    is not split by document), and its marker was refused for that."""
    from helpers import compose

    from corpusprep.prepare import prepare

    settings = [*_one_text(tmp_path), "executor.workers=1"]
    with monkeypatch.context() as patched:
        _fails_at(patched, 3)
        with pytest.raises(RuntimeError, match="shard 3 failed"):
            prepare(compose(*settings))
    markers = len(list((tmp_path / "out").glob(".corpusprep-work/*/*.done")))
    capsys.readouterr()
    prepare(compose(*settings))
    assert f"resuming: {markers} of {markers + 1} shards" in capsys.readouterr().err


def _rewrite_keeping_size_and_mtime(path: Path, old: bytes, new: bytes) -> None:
    """Other bytes in place, its size and mtime put back (as cp -p, rsync -a, touch -r)."""
    st = path.stat()
    path.write_bytes(path.read_bytes().replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _after_shard(monkeypatch, index: int, act) -> None:
    """`act()` once shard `index` is encoded (executor.workers=1: in this process)."""
    import corpusprep.shards as shards_module

    real = shards_module.encode_shard

    def encode_shard(task):
        result = real(task)
        if task.shard.index == index:
            act()
        return result

    monkeypatch.setattr(shards_module, "encode_shard", encode_shard)


def _fails_at(monkeypatch, index: int) -> None:
    """Shard `index` fails every time it runs (executor.workers=1: in this process)."""
    import corpusprep.shards as shards_module

    real = shards_module.encode_shard

    def encode_shard(task):
        if task.shard.index == index:
            raise RuntimeError(f"a disk that fails on shard {index}")
        return real(task)

    monkeypatch.setattr(shards_module, "encode_shard", encode_shard)


def test_a_text_rewritten_during_the_run_fails_it(tmp_path, monkeypatch, tiktoken_cache):
    """Its size and mtime put back or not, a text written while the run reads it ends the
    run with one line, before anything is committed (its shards read two texts)."""
    from helpers import compose

    from corpusprep.errors import UserError
    from corpusprep.prepare import prepare

    settings = (*_one_text(tmp_path), "executor.workers=1")
    text = tmp_path / "in.txt"
    _after_shard(monkeypatch, 2, lambda: _rewrite_keeping_size_and_mtime(text, b"the", b"THE"))
    with pytest.raises(UserError, match="in.txt: the file changed while it was being read"):
        prepare(compose(*settings))
    assert not (tmp_path / "out" / "train.bin").exists()


def test_a_resume_never_reuses_shards_of_a_text_rewritten_and_put_back(
    tmp_path, monkeypatch, capsys, tiktoken_cache
):
    """Run 1 records the text's sha256, then the text is rewritten in place (size and mtime
    put back), more shards read it, and the run fails; the text is then put back as it
    was. Its sha256 is the recorded one again, but the shards read other bytes: the next
    run redoes them all, and its files are a fresh run's."""
    import time

    from helpers import compose

    from corpusprep.prepare import prepare

    settings = (*_one_text(tmp_path), "executor.workers=1")
    text = tmp_path / "in.txt"
    original = text.read_bytes()

    def rewrite_once_recorded():
        deadline = time.monotonic() + 30
        while not list((tmp_path / "out").glob(".corpusprep-work/*/inputs.json")):
            assert time.monotonic() < deadline, "the input was never recorded"
            time.sleep(0.01)
        _rewrite_keeping_size_and_mtime(text, b"the", b"THE")

    with monkeypatch.context() as patched:
        _after_shard(patched, 1, rewrite_once_recorded)
        _fails_at(patched, 5)
        with pytest.raises(RuntimeError, match="shard 5 failed"):
            prepare(compose(*settings))
    assert len(list((tmp_path / "out").glob(".corpusprep-work/*/*.done"))) >= 4
    st = text.stat()
    text.write_bytes(original)  # as it was when run 1 recorded it
    os.utime(text, ns=(st.st_atime_ns, st.st_mtime_ns))
    capsys.readouterr()
    again = prepare(compose(*settings))
    assert "resuming" not in capsys.readouterr().err
    fresh = prepare(compose(*settings[:-2], f"out_dir={tmp_path / 'fresh'}", "quiet=true"))
    assert again["files"] == fresh["files"]


def test_a_text_removed_during_the_run_is_one_line(tmp_path, monkeypatch, tiktoken_cache):
    from helpers import compose

    from corpusprep.errors import UserError
    from corpusprep.prepare import prepare

    settings = [s for s in _one_text(tmp_path, copies=1) if not s.startswith("shard_bytes=")]
    text = tmp_path / "in.txt"  # 1.1 MB: one shard, encoded in this process
    _after_shard(monkeypatch, 0, text.unlink)  # the shard read it: then it is gone
    with pytest.raises(UserError, match="in.txt: the file was removed while it was being read"):
        prepare(compose(*settings))


# --- a compressed file's size, from its start -------------------------------------------


def _text(n: int) -> bytes:
    """n bytes or a little more of JSON lines of words in random order (compresses ~3x)."""
    rng = random.Random(n)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
             for _ in range(5000)]  # fmt: skip
    lines, size = [], 0
    while size < n:
        line = json.dumps({"text": " ".join(rng.choices(words, k=60))}).encode() + b"\n"
        lines.append(line)
        size += len(line)
    return b"".join(lines)


COMPRESS = {"zstd": zstandard.compress, "gzip": gzip.compress, "bz2": bz2.compress,
            "xz": lambda d: lzma.compress(d, preset=0)}  # fmt: skip


def _streamed_zstd(data: bytes) -> bytes:
    stream = zstandard.ZstdCompressor().compressobj()  # no content size in the header
    return stream.compress(data) + stream.flush()


@pytest.mark.parametrize("compression", ["zstd", "gzip", "xz"])
def test_a_big_files_size_is_guessed_from_its_start(tmp_path: Path, compression: str):
    data = _text(12 * SAMPLE_TEXT)
    packed = _streamed_zstd(data) if compression == "zstd" else COMPRESS[compression](data)
    packed = packed + (b"" if compression != "gzip" else gzip.compress(b"x"))  # gzip: 2 members
    path = tmp_path / f"a.{compression}"
    path.write_bytes(packed)
    size = path.stat().st_size
    guess = text_size(path, compression, None, size)
    assert abs(guess - len(data)) < 0.02 * len(data), (guess, len(data))
    assert abs(size * GUESSED_RATIO - len(data)) > 0.1 * len(data)  # the fixed ratio: off


def test_bz2_keeps_the_fixed_guess(tmp_path: Path):
    """bz2 decompresses too slowly for a sample to pay for itself."""
    path = tmp_path / "a.bz2"
    path.write_bytes(bz2.compress(_text(12 * SAMPLE_TEXT)))
    size = path.stat().st_size
    assert text_size(path, "bz2", None, size) == size * GUESSED_RATIO


@pytest.mark.parametrize("compression", ["zstd", "gzip", "xz"])
def test_a_compression_bomb_is_sampled_in_bounded_memory(tmp_path: Path, compression: str):
    """1 GB of zeros in a few hundred KB, padded to count as big: the sample's memory
    stays bounded (each step gives at most SAMPLE_OUT bytes), in a fresh process."""
    path = tmp_path / f"bomb.{compression}"
    zeros = bytes(1 << 20)
    with open(path, "wb") as f:
        if compression == "zstd":
            stream = zstandard.ZstdCompressor().compressobj()
            push, end = stream.compress, stream.flush
        elif compression == "gzip":
            stream = zlib.compressobj(9, zlib.DEFLATED, 31)
            push, end = stream.compress, stream.flush
        else:  # preset 0: zeros compress as small, 4 times faster than the default's
            stream = lzma.LZMACompressor(preset=0)
            push, end = stream.compress, stream.flush
        for _ in range(1024):
            f.write(push(zeros))
        f.write(end())
        f.write(os.urandom(2 * SAMPLE_TEXT))  # big enough to be sampled
    code = ("import resource\nfrom pathlib import Path\n"
            "from corpusprep.compression import text_size\n"
            "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "before = peak()\n"
            f"p = Path({str(path)!r}); text_size(p, {compression!r}, None, p.stat().st_size)\n"
            "print((peak() - before) // 1024)")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) < 50, f"the sample grew the process by {r.stdout.strip()} MB"


def test_a_short_text_in_a_file_counted_as_big_is_its_size(tmp_path: Path):
    """A file that compresses very well reads to its end within the sample: exact."""
    data = b"a" * (SAMPLE_TEXT - 10)
    path = tmp_path / "a.zst"
    path.write_bytes(_streamed_zstd(data))
    from corpusprep.compression import _size_from_its_start

    assert _size_from_its_start(path, "zstd", path.stat().st_size) == len(data)


def test_a_damaged_or_small_file_keeps_the_fixed_guess(tmp_path: Path):
    big = tmp_path / "big.zst"
    big.write_bytes(b"not zstd at all" * (SAMPLE_TEXT // 4))
    assert text_size(big, "zstd", None, big.stat().st_size) == big.stat().st_size * GUESSED_RATIO
    small = tmp_path / "small.zst"
    small.write_bytes(_streamed_zstd(_text(100_000)))
    assert text_size(small, "zstd", None, small.stat().st_size) == (
        small.stat().st_size * GUESSED_RATIO
    )  # packed with others: not worth a read


# --- a file's pieces and the order workers take them in ---------------------------------


class _File:
    def __init__(self, size: int) -> None:
        self.size = size

    def whole(self) -> tuple[int, int, int]:
        return 0, STREAM_END, self.size


def test_pieces_cover_the_file():
    size = 10**8
    pieces = compressed_pieces(_File(size), size // 20)
    assert len(pieces) == MAX_PIECES
    assert [p[0] for p in pieces[1:]] == [p[1] for p in pieces[:-1]]  # contiguous
    assert pieces[0][0] == 0 and pieces[-1][1] == STREAM_END
    assert sum(p[2] for p in pieces) == size
    assert compressed_pieces(_File(100), 10**6) == [(0, STREAM_END, 100)]


def _piece_tasks(tmp_path: Path, names: tuple[str, ...], compress, compression="zstd") -> list:
    from corpusprep.formats import Segment
    from corpusprep.shards import EncodeTask, Shard

    shards = []
    for name in names:
        (tmp_path / name).write_bytes(compress(_text(2_000_000)))
        file = InputFile(str(tmp_path / name), "jsonl", compression,
                         (tmp_path / name).stat().st_size)  # fmt: skip
        for start, end, nbytes in compressed_pieces(file, 10**5):
            shards.append(Shard(len(shards), (Segment(file, start, end, nbytes, None),)))
    plain = InputFile(str(tmp_path / "c.jsonl"), "jsonl", "none", 10)
    shards.append(Shard(len(shards), (Segment(plain, 0, 10, 10, None),)))
    return [EncodeTask(s, None) for s in shards]


def test_workers_take_the_last_pieces_first_then_the_plan_order(tmp_path: Path):
    """Files whose text's size is a guess (xz records none, and has no blocks to bound it):
    each one's last piece (maybe the longest) first, then the plan order."""
    from corpusprep.prepare import _taking_order

    tasks = _piece_tasks(tmp_path, ("a.jsonl.xz", "b.jsonl.xz"), lzma.compress, "xz")
    order = [t.shard.index for t in _taking_order(tasks)]
    n = (len(tasks) - 1) // 2  # pieces per file
    assert n > 2
    assert order == [n - 1, 2 * n - 1, *range(n - 1), *range(n, 2 * n - 1), 2 * n]


@pytest.mark.parametrize("compress", [zstandard.compress, _streamed_zstd])
def test_a_file_whose_size_is_known_or_bounded_is_taken_in_plan_order(tmp_path: Path, compress):
    """Its last piece is no guess (the size recorded, or a streamed zstd file's blocks bound
    it): no worker decompresses the whole file first to get it."""
    from corpusprep.prepare import _taking_order

    tasks = _piece_tasks(tmp_path, ("a.jsonl.zst", "b.jsonl.zst"), compress)
    assert len(tasks) == 2 * MAX_PIECES + 1
    assert [t.shard.index for t in _taking_order(tasks)] == list(range(len(tasks)))


def _zstd_in_blocks(data: bytes, step: int) -> bytes:
    """Streamed zstd with a block ended every `step` bytes (as a writer that flushes)."""
    stream = zstandard.ZstdCompressor().compressobj()
    flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
    body = b"".join(stream.compress(data[i : i + step]) + stream.flush(flush)
                    for i in range(0, len(data), step))  # fmt: skip
    return body + stream.flush()


@pytest.mark.parametrize("frames", [1, 3])
def test_a_streamed_zstd_files_blocks_bound_its_text(tmp_path: Path, frames: int):
    """Full blocks (as zstd writes a stream): the bound is within a block per frame of the
    text's size, never under it, and the plan takes it for the size: no piece can run past
    it, so none runs long (InputFile.size_bounded)."""
    from corpusprep.compression import text_bound

    data = _text(12 * SAMPLE_TEXT)
    cut = len(data) // frames
    parts = [data[i * cut : (i + 1) * cut if i < frames - 1 else None] for i in range(frames)]
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(b"".join(_streamed_zstd(p) for p in parts))
    size = path.stat().st_size
    bound = text_bound(path, "zstd", None, size)
    assert len(data) <= bound <= len(data) + frames * (1 << 17)
    assert text_size(path, "zstd", None, size) == bound
    assert InputFile(str(path), "jsonl", "zstd", size).size_bounded


def test_a_loose_bound_leaves_the_guess(tmp_path: Path):
    """Blocks ended every 40 KB hold a third of what they could: the bound is 3x the size,
    the guess from the start is kept, and its last piece goes first again."""
    from corpusprep.compression import text_bound

    data = _text(12 * SAMPLE_TEXT)
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(_zstd_in_blocks(data, 40_000))
    size = path.stat().st_size
    assert text_bound(path, "zstd", None, size) > 2 * len(data)
    guess = text_size(path, "zstd", None, size)
    assert abs(guess - len(data)) < 0.05 * len(data)  # the sample: from the start
    assert not InputFile(str(path), "jsonl", "zstd", size).size_bounded


def test_a_cut_or_damaged_zstd_file_has_no_bound(tmp_path: Path):
    """A file that ends inside a frame (or is not zstd) bounds nothing: the guess stays,
    and reading it reports the damage."""
    from corpusprep.compression import text_bound

    packed = _streamed_zstd(_text(12 * SAMPLE_TEXT))
    cut = tmp_path / "cut.zst"
    cut.write_bytes(packed[: len(packed) // 2])
    assert text_bound(cut, "zstd", None, cut.stat().st_size) == 0
    junk = tmp_path / "junk.zst"
    junk.write_bytes(b"not zstd at all" * (SAMPLE_TEXT // 4))
    assert text_bound(junk, "zstd", None, junk.stat().st_size) == 0


@pytest.mark.parametrize("workers", [1, 2, 3, 8, 64])
def test_a_files_pieces_go_in_runs_that_shrink(tmp_path: Path, workers: int):
    """Consecutive pieces of one file go to one worker as a run (it reads on where the
    piece before ended), each run at most 1 / (GUIDE * workers) of the work left (unless
    one piece), so the last runs are single pieces that even out the workers."""
    from corpusprep.prepare import GUIDE, _runs

    tasks = _piece_tasks(tmp_path, ("a.jsonl.zst", "b.jsonl.zst", "d.jsonl.zst"),
                         zstandard.compress)  # fmt: skip
    runs = _runs(tasks, workers)
    assert [t for run in runs for t in run.tasks] == tasks  # all, once, in order
    left = sum(t.shard.nbytes for t in tasks)
    for run in runs:
        pieces = [t.shard.segments[0] for t in run.tasks]
        assert len({p.file for p in pieces}) == 1
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))  # consecutive
        size = sum(t.shard.nbytes for t in run.tasks)
        assert len(run.tasks) == 1 or size <= left / (GUIDE * workers)
        left -= size
    assert len(runs[-2].tasks) == 1  # the plain file's shard, and the piece before it
    # the first run: about 1 / (GUIDE * workers) of all pieces (they differ a little in size)
    wanted = min(MAX_PIECES, 3 * MAX_PIECES // (GUIDE * workers))
    assert wanted - 1 <= len(runs[0].tasks) <= max(wanted, 1)
    assert runs[0].label == (f"shards 0-{len(runs[0].tasks) - 1}" if len(runs[0].tasks) > 1
                             else "shard 0")  # fmt: skip
    assert [r.tasks for r in _runs(tasks, None)] == [(t,) for t in tasks]  # engines: one by one


# --- the outputs' sha256 while the shards write them in place ---------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_in_place_outputs_are_hashed_while_written(tmp_path: Path, monkeypatch, workers):
    """char on one text: the shards write into train.bin/val.bin; their sha256 comes from
    the thread that followed the shards, and equals the file's. A file changed after it
    was hashed (here: the digest recorded for a wrong identity) is read again."""
    import hashlib

    from helpers import compose

    import corpusprep.writer as writer
    from corpusprep.prepare import prepare

    text = shakespeare_file().read_text(encoding="utf-8")
    (tmp_path / "in.txt").write_text(text * 2, encoding="utf-8")
    read_again = []
    real = writer.file_sha256
    monkeypatch.setattr(writer, "file_sha256", lambda p: read_again.append(p.name) or real(p))
    out = tmp_path / "out"
    manifest = prepare(compose("source=file", f"source.path={tmp_path / 'in.txt'}",
                               "shard_bytes=100000", f"executor.workers={workers}",
                               f"out_dir={out}", "quiet=true"))  # fmt: skip
    assert manifest["shards"]["count"] > 10
    for name in ("train.bin", "val.bin"):
        assert manifest["checksums"][name] == hashlib.sha256((out / name).read_bytes()).hexdigest()
    assert not any(n.startswith(temp_of("train.bin", "val.bin")) for n in read_again), read_again
    assert any(n.startswith(temp_of("meta.pkl")) for n in read_again)  # the seal hashes these

    read_again.clear()

    def as_if_changed_since(digest):  # the file as the writer left it was another one
        digest._left = ("another", "file")
        digest.out._digests[digest.path] = digest

    monkeypatch.setattr(writer.OutputWriter, "hashing", lambda self, d: as_if_changed_since(d))
    manifest = prepare(compose("source=file", f"source.path={tmp_path / 'in.txt'}",
                               "shard_bytes=100000", f"out_dir={out}", "force=true",
                               "quiet=true"))  # fmt: skip
    assert manifest["checksums"]["train.bin"] == hashlib.sha256(
        (out / "train.bin").read_bytes()).hexdigest()  # fmt: skip
    assert any(n.startswith(temp_of("train.bin")) for n in read_again)


@pytest.mark.parametrize(
    "settings",
    [
        ("tokenizer=tiktoken",),  # one text: the parts are concatenated
        ("tokenizer=tiktoken", "split_by=document"),  # each document to its side
        ("tokenizer=tiktoken", "split_by=document", "order=shuffle"),  # rewritten: read again
    ],
)
def test_merged_outputs_are_hashed_while_merged(tmp_path: Path, monkeypatch, settings):
    """The merge's train.bin/val.bin get their sha256 from a thread that follows the merge
    (GrowingDigest): the seal reads them no more, and the digests are the files'. A run
    that rewrites them after the merge (order=shuffle) has them read by the seal."""
    import hashlib

    from helpers import compose

    import corpusprep.writer as writer
    from corpusprep.prepare import prepare

    docs = [{"text": f"document {i} " + "word " * (i % 97)} for i in range(3000)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    read_again = []
    real = writer.file_sha256
    monkeypatch.setattr(writer, "file_sha256", lambda p: read_again.append(p.name) or real(p))
    out = tmp_path / "out"
    manifest = prepare(compose("source=file", f"source.path={tmp_path / 'a.jsonl'}",
                               "shard_bytes=20000", "executor.workers=2", *settings,
                               f"out_dir={out}", "quiet=true"))  # fmt: skip
    assert manifest["shards"]["count"] > 5
    for name in ("train.bin", "val.bin"):
        assert manifest["checksums"][name] == hashlib.sha256((out / name).read_bytes()).hexdigest()
    streams = [n for n in read_again if n.startswith(temp_of("train.bin", "val.bin"))]
    assert len(streams) == (2 if "order=shuffle" in settings else 0), read_again


def test_growing_digest_hashes_in_uneven_steps(tmp_path: Path, monkeypatch):
    """The thread reads into one buffer, reused at every step: growth in steps smaller and
    larger than the buffer, and not a multiple of it, gives the file's own sha256."""
    from corpusprep.writer import GrowingDigest, OutputWriter

    monkeypatch.setattr(GrowingDigest, "STEP", 7)
    data = os.urandom(1000)
    with OutputWriter(tmp_path / "out") as out:
        path = out.temp("a.bin")
        path.write_bytes(data)
        with GrowingDigest(out, path) as digest:
            for end in (3, 4, 20, 21, 64, 999, 1000):
                digest.grew(end)
        assert out._digests[path].result() == hashlib.sha256(data).hexdigest()


def test_growing_digest_leaves_a_short_file_to_the_seal(tmp_path: Path):
    """A file that ends before what the writer said (or is written to after) gets no
    digest from the thread: the seal reads it itself, so a checksum is always the file's."""
    from corpusprep.writer import GrowingDigest, OutputWriter

    with OutputWriter(tmp_path / "out") as out:
        short, later = out.temp("a.bin"), out.temp("b.bin")
        short.write_bytes(b"x" * 1000)
        later.write_bytes(b"y" * 1000)
        with GrowingDigest(out, short) as digest:
            digest.grew(500)
            digest.grew(2000)  # more than the file holds
        with GrowingDigest(out, later) as digest:
            digest.grew(1000)
        with open(later, "ab") as f:
            f.write(b"z")
        assert out._digests[short].result() is None
        assert out._digests[later].result() is None
        with pytest.raises(RuntimeError), GrowingDigest(out, short) as digest:
            digest.grew(1000)
            raise RuntimeError("a failed merge")
        assert not digest._thread.is_alive() and out._digests[short] is not digest
        files, sums = out._seal()
    assert sums["a.bin"] == hashlib.sha256(b"x" * 1000).hexdigest()
    assert sums["b.bin"] == hashlib.sha256(b"y" * 1000 + b"z").hexdigest()


# --- vocab_used from the shards' own flags ---------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        ("tokenizer=tiktoken", "split_by=document", "eot=append"),
        ("tokenizer=tiktoken", "split_by=hash"),
        ("tokenizer=tiktoken", "split_by=document", "order=shuffle"),
        ("tokenizer=tiktoken", "split_by=head", "val_size=300"),
        ("tokenizer=byte", "split_by=document"),
        ("tokenizer=tiktoken", "tokenizer.encoding=cl100k_base", "split_by=document"),
    ],
)
def test_vocab_used_is_what_the_outputs_hold(tmp_path: Path, tiktoken_cache, settings):
    """The shards say which ids they wrote; the manifest's vocab_used (the driver reads
    only val.bin now) is still the number of distinct ids in train.bin and val.bin."""
    import numpy as np

    rows = [json.dumps({"text": f"document {i}: " + "naïve 日本 words " * (i % 17)})
            for i in range(400)]  # fmt: skip
    (tmp_path / "a.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    r = run_cli("source=file", "source.path=a.jsonl", *settings, "shard_bytes=4000",
                "executor.workers=2", "out_dir=out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shards"]["count"] > 4
    dtype = np.dtype(manifest["dtype"])
    ids = np.concatenate([np.fromfile(out / f"{s}.bin", dtype=dtype) for s in ("train", "val")])
    assert manifest["vocab_used"] == len(np.unique(ids))


def test_without_every_shards_flags_the_ids_are_counted():
    import numpy as np

    from corpusprep.prepare import _ids_seen
    from corpusprep.shards import EncodeResult, _Seen

    seen = _Seen(9)
    seen.add(np.array([1, 3, 9]))
    assert _ids_seen([EncodeResult(ids_seen=seen.packed())], 10) == 3
    assert _ids_seen([EncodeResult(ids_seen=seen.packed()), EncodeResult()], 10) is None
    seen.add(np.array([10]))  # beyond max_id: a plugin's bug leaves it unknown
    assert seen.packed() is None


def _documents(tmp_path: Path) -> list[str]:
    rows = [json.dumps({"text": f"document {i}: " + "words " * 50}) for i in range(3000)]
    (tmp_path / "a.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return ["source=file", f"source.path={tmp_path / 'a.jsonl'}", "tokenizer=tiktoken",
            "shard_bytes=20000", f"out_dir={tmp_path / 'out'}", "quiet=true"]  # fmt: skip


def test_the_record_of_hashed_documents_is_written_before_any_shard_is_done(
    tmp_path: Path, monkeypatch, capsys, tiktoken_cache
):
    """Documents are keyed by their files' sha256, taken before the first shard; the record
    of it for a resume (every file's digest and identity) is written before any shard is
    done (see the test below for why), and a resume finds it."""
    from helpers import compose

    import corpusprep.prepare as prepare_module

    seen = []
    real = prepare_module._inputs_record

    def inputs_record(hashes, before):
        seen.append(len(list((tmp_path / "out").glob(".corpusprep-work/*/*.done"))))
        return real(hashes, before)

    monkeypatch.setattr(prepare_module, "_inputs_record", inputs_record)
    settings = (*_documents(tmp_path), "executor.workers=1")
    with monkeypatch.context() as patched:
        _fails_at(patched, 6)
        with pytest.raises(RuntimeError, match="shard 6 failed"):
            prepare_module.prepare(compose(*settings))
    assert seen == [0]  # taken once, before any shard was done
    assert list((tmp_path / "out").glob(".corpusprep-work/*/inputs.json"))
    capsys.readouterr()
    manifest = prepare_module.prepare(compose(*settings))
    assert f"resuming: {manifest['shards']['count'] - 1} of " in capsys.readouterr().err


def test_a_driver_killed_as_its_first_shard_is_done_leaves_it_resumable(
    tmp_path: Path, capsys, tiktoken_cache
):
    """Documents are keyed by their files' sha256, known before any shard starts: their
    record for a resume is written before then, so that every shard marked done can be
    resumed. A driver killed (SIGKILL, its node lost) once a shard's marker is written but
    before its result came in lost them all: on Slurm a killed driver's array runs on,
    and the re-run that cancels it found its shards' markers and no record. Here the
    driver runs the only worker (executor.workers=1) and dies with the first marker."""
    import multiprocessing

    from helpers import compose

    import corpusprep.shards as shards_module
    from corpusprep.prepare import prepare

    settings = [*_documents(tmp_path), "executor.workers=1"]

    def killed_with_the_first_marker():
        real = shards_module._write_marker

        def write_marker(*args, **kwargs):
            real(*args, **kwargs)
            os._exit(9)  # the driver dies: no cleanup, its result never taken

        shards_module._write_marker = write_marker
        prepare(compose(*settings))

    child = multiprocessing.get_context("fork").Process(target=killed_with_the_first_marker)
    child.start()
    child.join(120)
    assert child.exitcode == 9
    assert len(list((tmp_path / "out").glob(".corpusprep-work/*/*.done"))) == 1
    assert list((tmp_path / "out").glob(".corpusprep-work/*/inputs.json"))
    capsys.readouterr()
    manifest = prepare(compose(*settings))
    assert "resuming: 1 of " in capsys.readouterr().err
    fresh = [s if not s.startswith("out_dir=") else f"out_dir={tmp_path / 'fresh'}"
             for s in settings]  # fmt: skip
    assert manifest["files"] == prepare(compose(*fresh))["files"]


@pytest.mark.parametrize("kind", ["documents", "one text"])
def test_a_resume_killed_before_its_first_shard_keeps_the_earlier_shards(
    tmp_path: Path, monkeypatch, capsys, tiktoken_cache, kind: str
):
    """A resume that takes an earlier run's shards (its record of the input matched) and
    is killed (SIGKILL, the OOM killer, a node lost) before its own first shard is in
    (here: the one the earlier run's failed on) leaves that record as it was: the run
    after it still resumes from those shards, and its outputs are a fresh run's."""
    import multiprocessing

    from helpers import compose

    import corpusprep.shards as shards_module
    from corpusprep.prepare import prepare

    settings = [*(_documents if kind == "documents" else _one_text)(tmp_path), "executor.workers=1"]
    with monkeypatch.context() as patched:
        _fails_at(patched, 6)
        with pytest.raises(RuntimeError, match="shard 6 failed"):
            prepare(compose(*settings))
    assert list((tmp_path / "out").glob(".corpusprep-work/*/inputs.json"))

    def killed_at_shard_6():
        real = shards_module.encode_shard

        def encode_shard(task):
            if task.shard.index == 6:
                os._exit(9)  # the driver dies: no cleanup, no record written
            return real(task)

        shards_module.encode_shard = encode_shard
        prepare(compose(*settings))

    child = multiprocessing.get_context("fork").Process(target=killed_at_shard_6)
    child.start()
    child.join(120)
    assert child.exitcode == 9
    capsys.readouterr()
    manifest = prepare(compose(*settings))
    done = manifest["shards"]["count"] - 1  # all but shard 6, the earlier run's
    assert f"resuming: {done} of " in capsys.readouterr().err
    fresh = [s if not s.startswith("out_dir=") else f"out_dir={tmp_path / 'fresh'}"
             for s in settings]  # fmt: skip
    assert manifest["files"] == prepare(compose(*fresh))["files"]


@pytest.mark.parametrize("kind", ["documents", "one text"])
def test_a_run_whose_first_shard_fails_for_good_can_still_be_resumed(
    tmp_path: Path, monkeypatch, capsys, tiktoken_cache, kind: str
):
    """The record of the input the shards' markers come from is written while the workers
    encode (documents: their keys needed the hash; one text: once hashed), also when the
    first shard fails for good before any result came in: the others stay resumable, and
    the next run writes a fresh run's files."""
    from helpers import compose

    from corpusprep.prepare import prepare

    settings = [*(_documents if kind == "documents" else _one_text)(tmp_path), "executor.workers=1"]
    with monkeypatch.context() as patched:
        _fails_at(patched, 0)
        with pytest.raises(RuntimeError, match="shard 0 failed"):
            prepare(compose(*settings))
    assert list((tmp_path / "out").glob(".corpusprep-work/*/inputs.json"))
    capsys.readouterr()
    manifest = prepare(compose(*settings))
    assert "resuming: " in capsys.readouterr().err
    fresh = [s if not s.startswith("out_dir=") else f"out_dir={tmp_path / 'fresh'}"
             for s in settings]  # fmt: skip
    assert manifest["files"] == prepare(compose(*fresh))["files"]


# --- config files parsed in C -------------------------------------------------------------

TRICKY_YAML = """\
floats: [1e3, 1.5e-3, 1_000.5, .inf, -.Inf, .nan, 6.8523015e+5]
ints: [1_000, 0x1f, 0o17, -3]
words: [yes, no, on, off, null, ~, true, "1e3"]
stamp: 2001-12-14t21:59:43.10-05:00
date: 2002-12-14
path: !!python/object/apply:pathlib.Path [/tmp, x]
nested: {a: {b: [1, {c: d}]}}
text: |
  two
  lines
interp: ${oc.env:HOME,null}
"""


@pytest.mark.parametrize("case", ["shipped", "tricky"])
def test_the_c_loader_reads_what_omegaconfs_own_loader_reads(case: str):
    import yaml

    from corpusprep._paths import config_dirs
    from corpusprep.config import yaml_loader

    assert yaml_loader().__mro__[1] is yaml.CSafeLoader  # libyaml is in PyYAML's wheels
    if case == "shipped":
        texts = [f.read_text("utf-8") for root in config_dirs() for f in root.rglob("*.yaml")]
        assert len(texts) > 20
    else:
        texts = [TRICKY_YAML]
    from omegaconf import _utils

    assert _utils.get_yaml_loader() is not yaml_loader()  # OmegaConf's own, not patched here
    for text in texts:
        expected = yaml.load(text, Loader=_utils.get_yaml_loader())  # OmegaConf's own
        assert yaml.load(text, Loader=yaml_loader()) == expected
    if case == "tricky":  # the parts of OmegaConf's rules a plain SafeLoader would miss
        data = yaml.load(TRICKY_YAML, Loader=yaml_loader())
        assert data["floats"][0] == 1000.0 and isinstance(data["floats"][0], float)
        assert data["stamp"] == "2001-12-14t21:59:43.10-05:00"  # no timestamps: text
        assert data["path"] == Path("/tmp/x")


def test_the_c_loader_still_refuses_a_duplicate_key():
    import yaml

    from corpusprep.config import yaml_loader

    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key name"):
        yaml.load("name: a\nother: 1\nname: b\n", Loader=yaml_loader())


def test_hydra_composes_with_the_c_loader(tmp_path: Path):
    """Through the real CLI, up to the run: Hydra composed the config with the C loader."""
    (tmp_path / "t.txt").write_text("hello world\n" * 200)
    body = ("import yaml\nfrom omegaconf import _utils\n"
            "import corpusprep.prepare as P\n"
            "def probe(cfg, overrides=None):\n"
            "    print('loader', _utils.get_yaml_loader().__mro__[1].__name__, cfg.split)\n"
            "    return {}\n"
            "P.prepare = probe\n"
            "sys.argv = ['corpusprep', 'source=file', 'source.path=t.txt', 'split=0.8',"
            " 'out_dir=out', 'quiet=true']\napp.cli()")  # fmt: skip
    r = _entry(tmp_path, body)
    assert r.returncode == 0, r.stderr
    assert "loader CSafeLoader 0.8" in r.stdout


# --- the encoder built once, before the workers fork --------------------------------------


@pytest.mark.parametrize("split_by", ["document", "position"])
def test_workers_share_the_drivers_core(tmp_path: Path, monkeypatch, tiktoken_cache,
                                        split_by: str):  # fmt: skip
    """The faster backends' cores (riptoken's: 11.5 MB for gpt2) are built once, by the
    driver before it forks its workers, which share them: no worker builds its own.
    Documents (one pass) and one text (a count pass forks the pool first) alike; the ids
    are tiktoken's."""
    riptoken = pytest.importorskip("riptoken")
    splintr = pytest.importorskip("splintr")
    from helpers import compose

    import corpusprep.tokenizers.tiktoken as tiktoken_tokenizer
    from corpusprep.prepare import prepare

    built = tmp_path / "built"  # one line per core built: the backend and the process

    def recorded(name, make):
        def build(*args):
            with open(built, "a") as f:
                f.write(f"{name}:{os.getpid()}\n")
            return make(*args)

        return build

    monkeypatch.setattr(riptoken, "CoreBPE", recorded("riptoken", riptoken.CoreBPE))
    made = type("Made", (), {"from_bytes": staticmethod(
        recorded("splintr", splintr.Tokenizer.from_bytes))})  # fmt: skip
    monkeypatch.setattr(splintr, "Tokenizer", made)
    monkeypatch.setattr(tiktoken_tokenizer, "_cache", {})  # nothing built by earlier tests
    text = shakespeare_file().read_text(encoding="utf-8")
    if split_by == "document":
        source = tmp_path / "docs.jsonl"
        source.write_text("".join(json.dumps({"text": text[i : i + 5000]}) + "\n"
                                  for i in range(0, len(text), 5000)))  # fmt: skip
    else:
        source = tmp_path / "in.txt"
        source.write_text(text)
    ran = {}
    for backend in ("riptoken", "splintr", "tiktoken"):
        out = tmp_path / backend
        manifest = prepare(compose("source=file", f"source.path={source}", "tokenizer=tiktoken",
                                   f"tokenizer.backend={backend}", f"split_by={split_by}",
                                   "shard_bytes=100000", "executor.workers=2",
                                   f"out_dir={out}", "quiet=true"))  # fmt: skip
        assert manifest["shards"]["count"] > 4
        ran[backend] = out
    driver = os.getpid()
    assert built.read_text().split() == [f"riptoken:{driver}", f"splintr:{driver}"]  # once each
    for backend in ("riptoken", "splintr"):
        for name in ("train.bin", "val.bin"):
            assert (ran[backend] / name).read_bytes() == (ran["tiktoken"] / name).read_bytes()


def test_keys_in_counts_as_numpys_isin():
    from corpusprep.prepare import keys_in

    rng = np.random.default_rng(0)
    for n, m in [(0, 5), (5, 0), (1, 1), (300, 2000), (2000, 300)]:
        pool = rng.integers(0, 2**64 - 1, 400, dtype=np.uint64, endpoint=True)
        keys, others = rng.choice(pool, n), rng.choice(pool, m)  # repeats and overlaps
        assert keys_in(keys, others) == int(np.isin(keys, others).sum())
    top = np.array([2**64 - 1], dtype=np.uint64)
    assert keys_in(top, top) == 1 and keys_in(top, np.array([0], np.uint64)) == 0


# --- start-up: what every run pays before its first shard ---------------------------------


def test_a_source_with_corpusprep_own_defaults_reads_no_plugin_list(monkeypatch):
    """refuse_env allows conf/source/url.yaml's ${oc.env:CORPUSPREP_CACHE_DIR,null} from
    corpusprep's own files: the installed packages' entry points (0.02-0.1 s) are scanned
    only for a value corpusprep does not ship."""
    from omegaconf import OmegaConf

    import corpusprep._paths as paths
    from corpusprep.config import refuse_env

    def scanned():
        raise AssertionError("the plugin list was read")

    monkeypatch.setattr(paths, "plugin_config_packages", scanned)
    node = OmegaConf.create({"_target_": "corpusprep.sources.url.UrlSource", "url": "http://h/x",
                             "cache_dir": "${oc.env:CORPUSPREP_CACHE_DIR,null}"})  # fmt: skip
    refuse_env(node, "source")  # allowed, without the scan
    node.url = "http://h/x?k=${oc.env:HOME}"
    with pytest.raises(AssertionError, match="plugin list"):  # not corpusprep's: asks plugins
        refuse_env(node, "source")


def test_a_plugins_shipped_interpolation_is_still_allowed(tmp_path: Path, monkeypatch):
    from omegaconf import OmegaConf

    import corpusprep._paths as paths
    from corpusprep.config import refuse_env
    from corpusprep.errors import UserError

    package = tmp_path / "cp_plugin_env" / "conf"
    (package / "source").mkdir(parents=True)
    for folder in (package.parent, package):
        (folder / "__init__.py").write_text("")
    (package / "source" / "mirror.yaml").write_text(
        "_target_: cp_plugin_env.Mirror\nroot: ${oc.env:MIRROR_ROOT,/srv}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(paths, "plugin_config_packages", lambda: [("env", "cp_plugin_env.conf")])
    refuse_env(OmegaConf.create({"root": "${oc.env:MIRROR_ROOT,/srv}"}), "source")
    with pytest.raises(UserError, match="environment"):  # the plugin ships no other
        refuse_env(OmegaConf.create({"root": "${oc.env:HOME,/srv}"}), "source")


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base"])
def test_token_bytes_are_tiktokens_own_token_lengths(tiktoken_cache, encoding: str):
    """Each id's UTF-8 length, as tiktoken's decode_single_token_bytes gives it; 0 for a
    special token and for an id that is neither (cl100k_base has such gaps)."""
    import tiktoken

    from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

    enc = tiktoken.get_encoding(encoding)
    ours = TiktokenTokenizer(encoding).token_bytes()
    specials = set(enc._special_tokens.values())
    ranks = set(enc._mergeable_ranks.values())
    expected = [len(enc.decode_single_token_bytes(i)) if i in ranks else 0
                for i in range(enc.n_vocab)]  # fmt: skip
    assert ours.dtype == np.int32 and ours.tolist() == expected
    assert all(ours[i] == 0 for i in specials)


def test_the_bundled_ranks_are_gzip_and_a_damaged_copy_is_not_used(tmp_path, monkeypatch):
    """GPT-2's shipped ranks open in a few ms (gzip); a copy cut short or altered is
    never used (tiktoken then loads its own), whatever its damage."""
    import gzip
    import importlib.resources
    from importlib.resources import files

    import corpusprep.tokenizers.tiktoken as tk

    name, sha256 = tk.BUNDLED_RANKS
    packed = files("corpusprep.data").joinpath(name).read_bytes()
    assert packed[:2] == b"\x1f\x8b"
    assert hashlib.sha256(gzip.decompress(packed)).hexdigest() == sha256 == tk.R50K_SHA256
    assert tk.bundled_file("gpt2") == gzip.decompress(packed)
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(importlib.resources, "files", lambda package: data)  # read at call
    altered = gzip.compress(gzip.decompress(packed).replace(b" 0\n", b" 1\n", 1))
    for damaged in (packed[: len(packed) // 2], packed[:-8], b"not gzip", altered):
        (data / name).write_bytes(damaged)
        assert tk.bundled_file("gpt2") is None


def test_the_cli_starts_no_blas_threads(tmp_path: Path):
    """numpy's OpenBLAS starts a thread per core at import, and they spin while the
    workers encode: the command line's process (and so its forked workers) has none."""
    probe = (
        "import os, numpy\n"
        "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env=env, check=True)  # fmt: skip
    if (os.cpu_count() or 1) > 1:  # without it, numpy's import starts threads here
        assert int(plain.stdout.split()[0]) > 1, plain.stdout
    body = f"app.main = lambda: exec({probe!r})\napp.cli()"
    r = subprocess.run([sys.executable, "-c", f"import corpusprep.app as app\n{body}"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)  # fmt: skip
    assert (r.returncode, r.stdout.split()) == (0, ["1", "1"]), r.stderr


# --- part files are not sent to disk ------------------------------------------------------

_RECORD_WRITEBACK = """
import os, sys
import corpusprep.shards as shards
def record(fd, offset, nbytes):
    with open(os.environ["WRITEBACK_LOG"], "a") as log:
        log.write(os.readlink(f"/proc/self/fd/{fd}") + "\\n")
shards.start_writeback = record
sys.argv = ["corpusprep", *sys.argv[1:]]
app.main()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's sync_file_range")
@pytest.mark.parametrize(("tokenizer", "written_out"), [("char", True), ("tiktoken", False)])
def test_only_output_files_are_sent_to_disk_as_shards_write(tmp_path: Path, tiktoken_cache,
                                                            monkeypatch, tokenizer: str,
                                                            written_out: bool):  # fmt: skip
    """Shards writing into the output file itself (char: its token counts are known) start
    its writeback, so that the commit's fsync has little left; a shard's own part file (BPE)
    is read back by the merge and deleted, and writing it out only delays that fsync."""
    (tmp_path / "in.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 60_000)
    log = tmp_path / "writeback.log"
    monkeypatch.setenv("WRITEBACK_LOG", str(log))
    r = _entry(tmp_path, _RECORD_WRITEBACK, "source=file", "source.path=in.txt", "out_dir=out",
               f"tokenizer={tokenizer}", "shard_bytes=1000000", "executor.workers=2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    paths = log.read_text().split() if log.exists() else []
    if written_out:
        assert paths and all(Path(p).name.startswith(temp_of("train.bin", "val.bin"))
                             for p in paths)  # fmt: skip
    else:
        assert paths == []


# --- ids as intp a chunk at a time; documents keyed by sha256 where only counted --------


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_ids_seen_and_text_bytes_over_many_chunks(dtype: str):
    """Flags and byte counts taken a chunk of ids at a time are numpy's answers over the
    whole array, across chunk boundaries; an id beyond the vocabulary in the last chunk
    still leaves them unknown."""
    from corpusprep.shards import Index, _Seen, add_text_bytes

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50_000, 2 * Index.CHUNK + 777).astype(dtype)
    sizes = rng.integers(0, 9, 50_257).astype(np.int32)
    seen = _Seen(50_256)
    seen.add(ids)
    assert np.array_equal(seen.packed(), np.packbits(np.isin(np.arange(50_257), ids)))
    assert add_text_bytes(7, ids, sizes, Index()) == 7 + int(sizes[ids].sum())
    bad = ids.copy()
    bad[-1] = 50_257
    assert add_text_bytes(0, bad, sizes, Index()) is None
    seen.add(bad)
    assert seen.packed() is None


def _blake2b_draw(text: str, index: int, seed: int, split: float) -> bool:
    """split_by=hash's draw as it has been since it was written: train with probability
    `split`, from a seeded blake2b of the document's position and its blake2b-128."""
    content = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    draw = hashlib.blake2b(content, digest_size=8, key=seed.to_bytes(8, "little", signed=True),
                           salt=index.to_bytes(8, "little")).digest()  # fmt: skip
    return int.from_bytes(draw, "little") < split * 2**64


def test_split_by_hash_still_draws_from_blake2b(tmp_path: Path, tiktoken_cache):
    """Documents split by document are keyed by sha256 now (only to count duplicates);
    split_by=hash keeps the key it draws each side from: no document changes side."""
    texts = [f"document {i}: " + "naïve words " * (i % 13) for i in range(300)]
    for i in (7, 150):  # longer than a batch takes: keyed on their own path
        texts[i] += "a long document " * 5000
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts),
                                      encoding="utf-8")  # fmt: skip
    r = run_cli("source=file", "source.path=a.jsonl", "tokenizer=char", "split_by=hash",
                "eot=append", "seed=11", "split=0.7", "shard_bytes=3000", "out_dir=out",
                "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    from corpusprep.dataset import read_meta

    itos = read_meta(tmp_path / "out" / "meta.pkl")["itos"]
    eot = len(itos) - 1  # the separator: the char tokenizer's last id
    assert itos[eot] == "<|endoftext|>"
    sides = {}
    for side in ("train", "val"):
        ids = np.fromfile(tmp_path / "out" / f"{side}.bin", dtype=np.uint16).tolist()
        text = "".join("\0" if i == eot else itos[i] for i in ids)
        sides[side] = text.split("\0")[:-1]
    want_train = [t for i, t in enumerate(texts) if _blake2b_draw(t, i, 11, 0.7)]
    assert sides["train"] == want_train
    assert sides["val"] == [t for i, t in enumerate(texts) if not _blake2b_draw(t, i, 11, 0.7)]


@pytest.mark.parametrize("split_by", ["document", "hash"])
def test_a_resume_redoes_shards_whose_documents_were_keyed_another_way(
    tmp_path: Path, tiktoken_cache, split_by: str
):
    """A finished shard's keys count the exact duplicates across sides with every other
    shard's: one keyed by another hash (an earlier version's blake2b: no key_hash in its
    marker) is encoded again, and the count is the one a fresh run gives. split_by=hash
    always keyed by blake2b: its earlier shards are taken as they are."""
    from helpers import FAULTS, crash_after_documents

    # 40 documents each twice: once among the first 40, once among the last 40
    twice = [f"the document {i}, twice" for i in range(40)]
    texts = twice + [f"doc {i} " + "y" * i for i in range(220)] + twice
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts),
                                      encoding="utf-8")  # fmt: skip
    args = ["source=file", "source.path=d.jsonl", "tokenizer=tiktoken", f"split_by={split_by}",
            "split=0.5", "shard_bytes=3000", "executor.workers=1", "quiet=true"]  # fmt: skip
    done = run_cli(*args, "out_dir=ref", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ref = json.loads((tmp_path / "ref" / "manifest.json").read_text())["documents"]
    assert ref["exact_duplicates_across_splits"] > 0  # some pairs are split across the sides
    # the one process dies after 150 documents, its finished shards' markers left behind
    args = crash_after_documents(args, tmp_path)
    markers = sorted((tmp_path / "out").rglob("*.done"))
    assert markers
    for marker in markers:  # as an earlier version wrote them: blake2b keys, no key_hash
        record = json.loads(marker.read_text())
        assert record.pop("key_hash") == ("blake2b" if split_by == "hash" else "sha256")
        marker.write_text(json.dumps(record))
        if split_by == "document":  # keys no sha256 would give
            keys = Path(f"{marker}.keys")
            keys.write_bytes((np.fromfile(keys, dtype="<u8") ^ np.uint64(0x5A5A)).tobytes())
    again = run_cli(*args, "out_dir=out", cwd=tmp_path, env=FAULTS)
    assert again.returncode == 0, again.stderr
    reused = f"resuming: {len(markers)} of " in again.stderr
    assert reused == (split_by == "hash"), again.stderr
    made = json.loads((tmp_path / "out" / "manifest.json").read_text())["documents"]
    assert made == ref
    for side in ("train", "val"):
        assert (tmp_path / "out" / f"{side}.bin").read_bytes() == (
            tmp_path / "ref" / f"{side}.bin"
        ).read_bytes()


def test_cli_keeps_a_system_error_of_its_own_a_bug(tmp_path: Path):
    """A SystemError no Ctrl-C caused is a bug: its traceback, exit 1."""
    r = _entry(tmp_path, "def main():\n    raise SystemError('a bug')\napp.main = main\napp.cli()")
    assert r.returncode == 1
    assert "Traceback" in r.stderr and r.stderr.strip().endswith("SystemError: a bug")


def test_input_files_are_hashed_side_by_side(tmp_path: Path, monkeypatch):
    """Documents are keyed by their file's sha256, known before the first shard starts:
    hashed one file after the other, 14 Parquet files of 2 GB (FineWeb's sample) kept every
    core idle for 20 s. Files are hashed in threads (hashlib lets go of the GIL), one per
    core at most; a zip's members share their archive's one digest."""
    import corpusprep.prepare as prepare_module

    paths = [tmp_path / f"p{i}.jsonl" for i in range(3)]
    for i, path in enumerate(paths):
        path.write_bytes(b'{"text": "%d"}\n' % i)
    at_once = threading.Barrier(2, timeout=10)  # two files in hashing together, or a timeout
    hashed = []

    def meeting(path: Path) -> str:
        hashed.append(path)
        if len(hashed) <= 2:
            at_once.wait()
        return hashlib.sha256(path.read_bytes()).hexdigest()

    monkeypatch.setattr(prepare_module, "file_sha256", meeting)
    monkeypatch.setattr(prepare_module, "available_cores", lambda: 2)
    files = [InputFile(str(p), "jsonl") for p in paths]
    files.append(InputFile(str(paths[0]), "jsonl", member="x"))  # another name, same file
    digests = prepare_module._hashes(files)
    assert sorted(hashed) == paths  # each file once
    for path in paths:
        assert digests[str(path)] == hashlib.sha256(path.read_bytes()).digest()
    member = hashlib.sha256(digests[str(paths[0])] + b"x").digest()
    assert digests[f"{paths[0]}!x"] == member


def test_a_file_removed_before_it_is_hashed_is_one_line(tmp_path: Path):
    from corpusprep.errors import UserError
    from corpusprep.prepare import _hashes

    there, gone = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    there.write_text('{"text": "a"}\n')
    with pytest.raises(UserError, match=f"{gone}: the file was removed while it was being read"):
        _hashes([InputFile(str(there), "jsonl"), InputFile(str(gone), "jsonl")])


def test_a_ctrl_c_while_inputs_are_hashed_stops_the_run_at_once(tmp_path: Path, monkeypatch):
    """The hashing threads are daemons and the driver waits on them interruptibly: a Ctrl-C
    does not wait for a huge file's digest to finish."""
    import corpusprep.prepare as prepare_module

    paths = [tmp_path / f"huge{i}.jsonl" for i in range(3)]
    for path in paths:
        path.write_text('{"text": "a"}\n')
    endless, hashed = threading.Event(), []

    def slow(path: Path) -> str:
        hashed.append(path)
        endless.wait(60)
        return "00" * 32

    monkeypatch.setattr(prepare_module, "file_sha256", slow)
    monkeypatch.setattr(prepare_module, "available_cores", lambda: 1)
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    ctrl_c.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            prepare_module._hashes([InputFile(str(p), "jsonl") for p in paths])
        assert time.monotonic() - start < 20  # not the 60 s the digest would take
    finally:
        ctrl_c.cancel()
        endless.set()
    time.sleep(0.5)  # the thread ends its file: it takes no other
    assert hashed == paths[:1]


def _concurrency(monkeypatch, meet: int = 0) -> list[int]:
    """file_sha256 patched to note how many files are being hashed at once (each waits a
    little, so that threads overlap if they may; the first `meet` wait for each other)."""
    import corpusprep.prepare as prepare_module

    lock, now, most, arrived = threading.Lock(), [0], [0], [0]
    meeting = threading.Barrier(meet, timeout=10) if meet else None
    real = prepare_module.file_sha256

    def counting(path: Path) -> str:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
            arrived[0] += 1
            first = arrived[0] <= meet  # (a later one would wait out the timeout alone)
        if meeting is not None and first:
            with contextlib.suppress(threading.BrokenBarrierError):
                meeting.wait()
        time.sleep(0.05)
        try:
            return real(path)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(prepare_module, "file_sha256", counting)
    return most


def test_executor_workers_bounds_the_hashing_threads(tmp_path: Path, monkeypatch, tiktoken_cache):
    """executor.workers=1 asks for one core: the input files are hashed one at a time then,
    as they are encoded (a thread per core is for a run that may use them all)."""
    from helpers import compose

    import corpusprep.prepare as prepare_module

    monkeypatch.setattr(prepare_module, "available_cores", lambda: 4)
    for i in range(4):
        rows = [json.dumps({"text": f"file {i} document {k} " + "words " * 20}) for k in range(50)]
        (tmp_path / f"p{i}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    args = ["source=files", f"source.glob={tmp_path}/p*.jsonl", "tokenizer=tiktoken",
            "split_by=document", "quiet=true"]  # fmt: skip
    most = _concurrency(monkeypatch)
    prepare_module.prepare(compose(*args, f"out_dir={tmp_path / 'one'}", "executor.workers=1"))
    assert most[0] == 1
    most = _concurrency(monkeypatch, meet=3)
    prepare_module.prepare(compose(*args, f"out_dir={tmp_path / 'all'}", "executor.workers=3"))
    assert most[0] == 3  # as many as the workers (of the 4 cores), no more


def test_a_failed_file_is_said_without_waiting_for_later_files(tmp_path: Path, monkeypatch):
    """The first file's error is said as soon as no file before it can fail first: not
    after a later, huge file's digest that the error makes useless."""
    import corpusprep.prepare as prepare_module
    from corpusprep.errors import UserError

    first, huge = tmp_path / "gone.jsonl", tmp_path / "huge.jsonl"
    huge.write_text('{"text": "a"}\n')
    endless, started = threading.Event(), threading.Event()
    real = prepare_module.file_sha256

    def slow(path: Path) -> str:
        if path == huge:
            started.set()
            endless.wait(60)
        else:  # the first file fails once the huge one's digest is under way
            started.wait(10)
        return real(path)

    monkeypatch.setattr(prepare_module, "file_sha256", slow)
    start = time.monotonic()
    try:
        with pytest.raises(UserError, match=f"{first}: the file was removed"):
            prepare_module._hashes([InputFile(str(first), "jsonl"), InputFile(str(huge), "jsonl")],
                                   threads=2)  # fmt: skip
        assert time.monotonic() - start < 20  # not the 60 s the later digest takes
    finally:
        endless.set()


def test_the_commit_is_on_the_runs_clock(tmp_path: Path, monkeypatch):
    """The manifest's seconds count the commit's seal too (the fsyncs, the outputs'
    digests still being taken): its total is all the run's own time but the manifest's
    writing, so that what a benchmark finds outside it is start-up and exit."""
    from helpers import compose

    import corpusprep.prepare as prepare_module
    from corpusprep.writer import OutputWriter

    seal = OutputWriter._seal

    def slow_seal(self):
        time.sleep(0.3)
        return seal(self)

    monkeypatch.setattr(OutputWriter, "_seal", slow_seal)
    (tmp_path / "t.txt").write_text("hello world\n" * 200)
    args = ["source=file", f"source.path={tmp_path / 't.txt'}", f"out_dir={tmp_path / 'out'}"]
    manifest = prepare_module.prepare(compose(*args, "quiet=true"))
    seconds = manifest["seconds"]
    assert seconds["commit"] >= 0.3 and seconds["total"] >= 0.3
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["seconds"] == seconds


def test_the_first_failing_file_is_said_even_when_it_fails_last(tmp_path: Path, monkeypatch):
    """A later file failing first does not pre-empt an earlier one still being hashed: the
    error said is the first file's in the inputs' order, as one after another would say."""
    import corpusprep.prepare as prepare_module

    later_failed = threading.Event()

    def failing(path: Path) -> str:
        if path.name == "a.jsonl":  # the first input: fails once the second has failed
            later_failed.wait(10)
            time.sleep(0.2)
            raise ValueError("a")
        later_failed.set()
        raise ValueError("b")

    monkeypatch.setattr(prepare_module, "file_sha256", failing)
    files = [InputFile(str(tmp_path / name), "jsonl") for name in ("a.jsonl", "b.jsonl")]
    with pytest.raises(ValueError, match="^a$"):
        prepare_module._hashes(files, threads=2)


def _counted_hashing(monkeypatch, paths: list[Path]) -> list[Path]:
    """file_sha256 made slow (0.05 s a file), noting each file it is called on."""
    import corpusprep.prepare as prepare_module

    hashed: list[Path] = []

    def slow(path: Path) -> str:
        hashed.append(path)
        if path.name != "bad.jsonl":
            time.sleep(0.05)
            return "00" * 32
        raise ValueError("unreadable")

    monkeypatch.setattr(prepare_module, "file_sha256", slow)
    return hashed


def test_after_a_failure_no_thread_starts_on_another_file(tmp_path: Path, monkeypatch):
    import corpusprep.prepare as prepare_module

    paths = [tmp_path / "bad.jsonl", *(tmp_path / f"f{i}.jsonl" for i in range(20))]
    hashed = _counted_hashing(monkeypatch, paths)
    with pytest.raises(ValueError, match="unreadable"):
        prepare_module._hashes([InputFile(str(p), "jsonl") for p in paths], threads=1)
    time.sleep(0.3)  # time for a thread that went on to take several files
    assert hashed == paths[:1]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupt_between_thread_starts_stops_the_started_ones(tmp_path: Path, monkeypatch,
                                                                   error):  # fmt: skip
    """A Ctrl-C (or "can't start new thread") while the threads are being started: the ones
    running take no other file once the first is done; a RuntimeError after one thread is
    running leaves the work to the threads there are."""
    import corpusprep.prepare as prepare_module

    paths = [tmp_path / f"f{i}.jsonl" for i in range(20)]
    hashed = _counted_hashing(monkeypatch, paths)
    real_start, starts = threading.Thread.start, []

    def start(self: threading.Thread) -> None:
        starts.append(self)
        if len(starts) == 2:
            raise error("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    files = [InputFile(str(p), "jsonl") for p in paths]
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            prepare_module._hashes(files, threads=2)
        time.sleep(0.3)
        assert len(hashed) <= 2  # the one in flight (and at most one more), not all 20
    else:
        digests = prepare_module._hashes(files, threads=2)  # one thread does it all
        assert sorted(hashed) == sorted(paths) and sorted(digests) == sorted(map(str, paths))


# --- what a worker imports ---------------------------------------------------------------


@pytest.mark.parametrize("cap", [[], ["source.max_bytes=100000000"]])
def test_reading_parquet_never_imports_pandas(tmp_path: Path, cap: list[str]):
    """pandas took 0.3-0.4 s and 30-50 MB in every worker that read a Parquet file as
    datasets writes one (each row group's texts in a dictionary page): pyarrow imports it
    to convert a Python or numpy value (pa.scalar, pa.array), which fill_null(x, 0) did."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "docs.parquet"
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        for group in range(3):  # a row group per 1,000 rows, as Dataset.to_parquet writes
            writer.write_table(pa.table({"text": [f"document {group} {i}" for i in range(1000)]}))
    assert "RLE_DICTIONARY" in pq.ParquetFile(path).metadata.row_group(0).column(0).encodings
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "corpusprep", "source=file",
         f"source.path={path}", "tokenizer=byte", "quiet=true", "shard_bytes=1",
         f"out_dir={tmp_path / 'out'}", *cap],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert "pyarrow.parquet" in imported  # (the workers' imports are in it too)
    assert "pandas" not in imported


def test_lengths_and_indices_from_arrows_buffers_are_pyarrows():
    """What the dictionary reader takes from the buffers, against pyarrow's own values:
    sliced arrays (an offset into the buffers), nulls, 64-bit offsets, unsigned indices."""
    pa = pytest.importorskip("pyarrow")
    from corpusprep.formats.parquet import _lengths, _values

    for kind in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        raw = ["a", None, "ccc", "", "dd", "é"] * 3
        texts = pa.array([v if v is None or "binary" not in str(kind) else v.encode()
                          for v in raw], kind)  # fmt: skip
        for piece in (texts, texts.slice(2, 9), texts.slice(5)):
            expected = [0 if v is None else len(v if isinstance(v, bytes) else v.encode())
                        for v in piece.to_pylist()]  # fmt: skip
            assert _lengths(piece).tolist() == expected
    for kind in (pa.int8(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16()):
        indices = pa.array([1, None, 3, 0, None, 2, 2, 100, None], kind)
        for piece in (indices, indices.slice(1, 6), indices.slice(7)):
            assert _values(piece).tolist() == [v or 0 for v in piece.to_pylist()]

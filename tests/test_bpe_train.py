"""tokenizer=bpe (issue 14): a byte-level BPE trained on the corpus as it is prepared.

- the command from the issue works offline, its folder passes inspect --verify, and its
  files are the same bytes for 1 or 2 workers and any shard size;
- the saved tokenizer.tiktoken, read by tiktoken's own loader with meta.pkl's pattern,
  encodes the val text into val.bin's ids (nanoGPT encodes each side on its own);
- the ids are rustbpe's own: its encoder and ours (tiktoken and riptoken over the trained
  ranks) agree on mixed text (CRLF, emoji, CJK, long lines, whitespace runs), whole and
  cut at CUT_AT, for each named pattern;
- the training sample does not depend on how the text arrives or is cut into shards, and
  stays within tokenizer.train_chars;
- documents get "<|endoftext|>" as the last id; mistakes get one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_one_line_error, run_cli, same_files

pytest.importorskip("rustbpe")

from corpusprep.sample import (  # noqa: E402
    Sample,
    Sampler,
    SampleRule,
    lowest,
    merge_samples,
    priority,
)

FILES = ("train.bin", "val.bin", "meta.pkl", "tokenizer.tiktoken")
MIXED = [
    "Hello, World!\r\nSecond line\r\n\r\n",
    "emoji 😀🎉 👩‍👩‍👧 and CJK 中文字符 日本語のテキスト 한국어\n",
    "    indented   with    runs\t\t\tof whitespace      \n\n\n\nx\n",
    "a" * 3000 + " " + "b" * 2000 + "\n",
    "def f(x):\n    return x ** 2  # it's, we'll, they've DON'T\n",
    "numbers 1234567 3.14159 0x1F 10,000,000\n",
    "Ünïcödé àccents ñ ß ø\u00a0nbsp\u2003em-space\n",
    "\n\n  \n \r\n",
]


def _mixed_corpus(copies: int = 40) -> str:
    rng = random.Random(7)
    lines = MIXED * copies
    rng.shuffle(lines)
    return "".join(lines)


# --- the command from the issue ----------------------------------------------------------


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """dataset=shakespeare_char tokenizer=bpe vocab 1024: 1 worker, and 2 workers with two
    shard sizes (tiny shakespeare then lies in 18 and 6 shards)."""
    root = tmp_path_factory.mktemp("bpe")
    env = {"CORPUSPREP_CACHE_DIR": str(root / "cache")}
    runs = {"one": ["executor.workers=1"],
            "two-small": ["executor.workers=2", "shard_bytes=65536"],
            "two-mid": ["executor.workers=2", "shard_bytes=200000"]}  # fmt: skip
    outs = {}
    for name, extra in runs.items():
        out = outs[name] = root / name
        done = run_cli("dataset=shakespeare_char", "tokenizer=bpe", "tokenizer.vocab_size=1024",
                       *extra, f"out_dir={out}", cwd=root, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return outs


def test_the_same_files_for_any_workers_and_shards(made):
    for other in ("two-small", "two-mid"):
        same_files(made["one"], made[other], FILES)
    manifest = json.loads((made["one"] / "manifest.json").read_text())
    assert manifest["vocab_size"] == 1024
    assert manifest["tokenizer"]["kind"] == "bpe"
    assert "tokenizer.tiktoken" in manifest["files"]
    assert manifest["tokenizer"]["sha256"] == manifest["checksums"]["tokenizer.tiktoken"]
    assert manifest["tokenizer"]["sample_chars"] == 1_115_394  # under train_chars: all of it


def test_the_folder_verifies(made):
    done = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(made["two-small"]),
                           "--verify"], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "verified: decoding train + val gives back" in done.stdout


def test_tiktoken_reads_the_saved_tokenizer_and_encodes_val_into_val_bin(made, shakespeare):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    out = made["one"]
    with open(out / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == 1024  # what nanoGPT's train.py sizes the model with
    ranks = load_tiktoken_bpe(str(out / "tokenizer.tiktoken"))
    assert len(ranks) == 1024
    enc = tiktoken.Encoding("trained", pat_str=meta["pat_str"], mergeable_ranks=ranks,
                            special_tokens=meta["special_tokens"])  # fmt: skip
    data = shakespeare.read_text(encoding="utf-8")
    n = len(data)
    val_ids = enc.encode_ordinary(data[int(n * 0.9) :])  # nanoGPT's split, then encode
    assert np.fromfile(out / "val.bin", dtype=np.uint16).tolist() == val_ids
    train_ids = enc.encode_ordinary(data[: int(n * 0.9)])
    assert np.fromfile(out / "train.bin", dtype=np.uint16).tolist() == train_ids
    # and nanoGPT's sample.py decodes with meta.pkl's itos
    assert "".join(meta["itos"][i] for i in val_ids[:200]) == enc.decode(val_ids[:200])


def test_corpusprep_load_rebuilds_it_and_refuses_a_changed_file(made, tmp_path):
    import shutil

    import corpusprep
    from corpusprep.errors import UserError

    ds = corpusprep.load(made["one"])
    assert ds.tokenizer.vocab_size == 1024
    assert ds.tokenizer.decode(ds.val[:50].tolist()).startswith("?\n\nGREMIO:")
    copy = tmp_path / "copy"
    shutil.copytree(made["one"], copy)
    lines = (copy / "tokenizer.tiktoken").read_bytes().splitlines(keepends=True)
    lines[300], lines[301] = (
        lines[301].replace(b" 301", b" 300"),
        lines[300].replace(b" 300", b" 301"),
    )
    (copy / "tokenizer.tiktoken").write_bytes(b"".join(lines))
    with pytest.raises(UserError, match="tokenizer.tiktoken: not the file the manifest records"):
        corpusprep.load(copy)


# --- the ids are rustbpe's own ----------------------------------------------------------


@pytest.mark.parametrize("pattern", ["cl100k", "gpt2", "o200k"])
def test_ids_equal_rustbpes_own_encoder_on_mixed_text(pattern):
    import rustbpe

    from corpusprep.tokenizers.bpe import PATTERNS, BpeTokenizer

    corpus = _mixed_corpus(15)
    sampler = Sampler(SampleRule(10**9, None))
    list(sampler.document([corpus]))
    sample = sampler.result()
    reference = rustbpe.Tokenizer()
    reference.train_from_iterator(iter(sample.units), 450, pattern=PATTERNS[pattern])
    texts = [corpus, *MIXED, "".join(MIXED), corpus[::-1]]
    for backend in ("tiktoken", "riptoken"):
        ours = BpeTokenizer(vocab_size=450, pattern=pattern, backend=backend)
        ours.fit("", sample=sample)
        assert ours.vocab_size == 450
        for text in texts:
            expected = reference.encode(text)
            assert ours.encode(text).tolist() == expected, (backend, text[:40])
            # cut where CUT_AT allows, in segments: the same ids
            pieces = [text[i : i + 97] for i in range(0, len(text), 97)]
            from corpusprep.tokenizers.tiktoken import encode_at_cuts

            cut = encode_at_cuts(ours.encode, pieces, True, 64)
            assert np.concatenate(list(cut)).tolist() == expected, (backend, text[:40])


def test_the_trainer_sees_the_same_units_as_one_text():
    """Units cut at CUT_AT give rustbpe the pre-tokens of the whole text: the same merges."""
    import rustbpe

    from corpusprep.tokenizers.bpe import PATTERNS

    corpus = _mixed_corpus(10).replace("\r\n", "\n")
    sampler = Sampler(SampleRule(10**9, None))
    list(sampler.document([corpus]))
    assert "".join(sorted(sampler.result().units)) != corpus  # units, in priority order
    assert sorted(sampler.result().units) == sorted(_split_at_cuts(corpus))
    merges = []
    for inputs in ([corpus], sampler.result().units):
        t = rustbpe.Tokenizer()
        t.train_from_iterator(iter(inputs), 600, pattern=PATTERNS["cl100k"])
        merges.append(t.get_mergeable_ranks())
    assert merges[0] == merges[1]


def _split_at_cuts(text: str) -> list[str]:
    from corpusprep.sample import UNIT_END

    ends = [m.end() for m in UNIT_END.finditer(text)]
    return [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)]) if b > a]


# --- the sample --------------------------------------------------------------------------


def test_the_sample_does_not_depend_on_pieces_or_shards():
    corpus = _mixed_corpus(30)
    units = _split_at_cuts(corpus)
    # units of very different sizes (a 5,000-character line among short ones): a shard
    # can stop at a big unit whose place a small one would take in another cut
    rule = SampleRule(chars=len(corpus) // 3, max_doc_chars=None, seed=5)
    rng = random.Random(1)
    results = []
    for _ in range(40):
        # cut the text into shards at unit ends, and each shard's text into odd pieces
        cuts = sorted(rng.sample(range(1, len(units)), rng.randint(0, 8)))
        shards = ["".join(units[a:b]) for a, b in zip([0, *cuts], [*cuts, len(units)])]
        samples = []
        for text in shards:
            sampler = Sampler(rule)
            size = rng.randint(1, 500)
            list(sampler.document(text[i : i + size] for i in range(0, len(text), size)))
            samples.append(sampler.result())
        merged = merge_samples(samples, rule.chars)
        results.append((merged.priorities, merged.units))
        assert merged.chars <= rule.chars
        assert merged.seen_chars == len(corpus)
    assert all(r == results[0] for r in results)
    # the lowest priorities, as if seen all at once
    at_once = Sampler(rule)
    list(at_once.document([corpus]))
    whole = at_once.result()
    assert (whole.priorities, whole.units) == results[0]
    # and by the definition: sorted by key, the longest prefix within the budget
    keys = sorted((priority(u, rule.seed), u) for u in units)
    sizes = np.cumsum([len(u) for _, u in keys])
    expected = keys[: int((sizes <= rule.chars).sum())]
    assert list(zip(whole.priorities, whole.units)) == expected
    assert any(a == b for a, b in zip(expected, expected[1:]))  # duplicates were in play


def test_the_sample_stays_within_train_chars_while_it_is_gathered():
    rule = SampleRule(chars=2_000, max_doc_chars=None, seed=0)
    sampler = Sampler(rule)
    for _ in sampler.document([f"line {i} of text\nNext\n" for i in range(5_000)]):
        assert sampler.sample.chars <= rule.chars * 5 // 4 + 100
    sample = sampler.result()
    assert 1_900 < sample.chars <= 2_000
    assert sample.priorities == sorted(sample.priorities)


def test_a_unit_longer_than_the_budget_is_left_out_wherever_it_is():
    rule = SampleRule(chars=100, max_doc_chars=None, seed=0)
    text = "Short line\n" + "x" * 500 + "\nAnother short one\n"
    sampler = Sampler(rule)
    list(sampler.document([text]))
    assert sorted(sampler.result().units) == ["Another short one\n", "Short line\n"]


def test_a_strangers_vocabulary_file_must_be_a_byte_level_bpe(tmp_path):
    from corpusprep.errors import UserError
    from corpusprep.tokenizers.bpe import ranks_file_bytes, read_tokens

    good = [bytes([b]) for b in range(256)] + [b"ab", b"abc"]
    assert read_tokens(ranks_file_bytes(good), tmp_path / "t") == good
    for bad in (good[1:], good + [b"ab"], [b"ab", *good]):  # a byte missing, twice, out of place
        with pytest.raises(UserError, match="not a byte-level BPE vocabulary"):
            read_tokens(ranks_file_bytes(bad), tmp_path / "t")


def test_a_document_gives_units_from_its_first_max_doc_chars():
    rule = SampleRule(chars=10**9, max_doc_chars=25, seed=0)
    sampler = Sampler(rule)
    text = "First line here\nSecond line here\nThird line\n"
    assert "".join(sampler.document(iter([text[:7], text[7:]]))) == text  # passed through
    assert sorted(sampler.result().units) == sorted(["First line here\n", "Second li"])
    # a part of a document that starts past the cap gives nothing
    late = Sampler(rule)
    list(late.document([text], before=30))
    assert late.result().units == []
    sample = Sample([3, 1, 2], ["c", "a", "bb"])
    lowest(sample, 3)
    assert (sample.priorities, sample.units, sample.stop) == ([1, 2], ["a", "bb"], (3, "c"))
    assert Sample().chars == 0


# --- documents -------------------------------------------------------------------------


def test_documents_get_an_end_of_text_id_and_the_same_files_from_pieces(tmp_path):
    zstd = pytest.importorskip("zstandard")
    lines = []
    rng = random.Random(3)
    for i in range(3_000):
        lines.append(json.dumps({"text": f"Doc {i}: " + rng.choice(MIXED) * rng.randint(1, 4)}))
    (tmp_path / "docs.jsonl.zst").write_bytes(
        zstd.ZstdCompressor().compress(("\n".join(lines) + "\n").encode())
    )
    outs = []
    for i, extra in enumerate((["executor.workers=1"],
                               ["executor.workers=2", "shard_bytes=20000"])):  # fmt: skip
        out = tmp_path / f"out{i}"
        done = run_cli("source=file", f"source.path={tmp_path / 'docs.jsonl.zst'}",
                       "tokenizer=bpe", "tokenizer.vocab_size=400", "tokenizer.train_chars=60000",
                       *extra, f"out_dir={out}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        outs.append(out)
    same_files(outs[0], outs[1], FILES)
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    described = manifest["tokenizer"]
    assert described["eot_id"] == 399 and manifest["vocab_size"] == 400
    assert 55_000 < described["sample_chars"] <= 60_000
    ids = np.fromfile(outs[0] / "train.bin", dtype=np.uint16)
    assert int(ids.max()) == 399 and (ids == 399).sum() == manifest["documents"]["train"]


# --- mistakes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("tokenizer.vocab_size=200", "tokenizer.vocab_size=200: a byte-level BPE has 256"),
        # rustbpe's u32: an OverflowError after the scan
        ("tokenizer.vocab_size=4294967296", "tokenizer.vocab_size=4294967296: more than"),
        ("tokenizer.pattern='(?<bad'", "tokenizer.pattern='(?<bad'"),
        # a misspelt name is not taken as a regex (gpt4 would match almost nothing)
        ("tokenizer.pattern=gpt4", "tokenizer.pattern=gpt4: not a known pattern name; use gpt2"),
        # a regex that leaves text out would drop it from the output, silently
        ("tokenizer.pattern='[a-z]+'", "tokenizer.pattern='[a-z]+': does not match every"),
        ("tokenizer.train_chars=0", "tokenizer.train_chars=0: give a positive number"),
        # docs/tokenizers.md: bpe takes no splintr
        ("tokenizer.backend=splintr", "tokenizer.backend=splintr: unknown backend; use auto"),
        ("tokenizer.seed=1e40", "tokenizer.seed=1e+40: give an integer"),
        # a piece ends with its "\n", after a character: none fits in 1
        ("tokenizer.train_chars=1", "the training sample is empty"),
    ],
)
def test_mistakes_get_one_line(tmp_path, override, fragment):
    done = run_cli("dataset=shakespeare_char", "tokenizer=bpe", override,
                   f"out_dir={tmp_path / 'out'}", cwd=tmp_path,
                   env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert_one_line_error(done, fragment)
    assert not (tmp_path / "out" / "train.bin").exists()


AMBIGUOUS = r"(a|a)*(?=b)|\s|."  # fancy-regex's backtrack limit on a run of a's


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [(AMBIGUOUS, "the regex engine gave up on the text"), ("x*", "x+ rather than x*")],
    ids=["backtrack-limit", "empty-match"],
)
def test_a_pattern_that_makes_the_regex_engine_panic_is_one_line(tmp_path, pattern, fragment):
    # the engines panic (pyo3's PanicException, a BaseException); nor is Rust's panic
    # report printed, even with RUST_BACKTRACE=1
    (tmp_path / "t.txt").write_text(("hello world\n" + "a" * 40 + "!\nmore text\n") * 50)
    done = run_cli("source=file", "source.path=t.txt", "tokenizer=bpe",
                   "tokenizer.vocab_size=260", f"tokenizer.pattern='{pattern}'", "out_dir=out",
                   cwd=tmp_path, env={"RUST_BACKTRACE": "1"})  # fmt: skip
    assert_one_line_error(done, f"tokenizer.pattern={pattern!r}", fragment)
    assert "panicked" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("pattern", [AMBIGUOUS, "x*"], ids=["backtrack-limit", "empty-match"])
def test_a_reused_folder_whose_pattern_panics_is_one_line_naming_it(tmp_path, pattern):
    # a stranger's folder: its manifest's pattern is used to encode, never trained with
    (tmp_path / "a.txt").write_text("hello world\nmore text\n" * 200)
    made = run_cli("source=file", "source.path=a.txt", "tokenizer=bpe",
                   "tokenizer.vocab_size=260", "tokenizer.pattern='[a-z]+|\\s+|.'",
                   "out_dir=src", cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    manifest = json.loads((tmp_path / "src" / "manifest.json").read_text())
    manifest["config"]["tokenizer"]["pattern"] = pattern
    (tmp_path / "src" / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "b.txt").write_text(("hello world\n" + "a" * 40 + "!\nmore text\n") * 50)
    done = run_cli("source=file", "source.path=b.txt", "tokenizer=reuse",
                   f"tokenizer.dir={tmp_path / 'src'}", "out_dir=out", cwd=tmp_path,
                   env={"RUST_BACKTRACE": "1"})  # fmt: skip
    assert_one_line_error(done, str(tmp_path / "src"), f"tokenizer.pattern={pattern!r}")
    assert "panicked" not in done.stderr and not (tmp_path / "out").exists()


def test_a_reused_folder_with_a_ranks_file_over_64_mb_is_refused_unread(tmp_path):
    # docs/safety.md: at most 64 MB for a ranks file (it was 1 GiB: a stranger's 80 MB file
    # took 18 s and 2.6 GB); refused on its size, before it is read or hashed
    (tmp_path / "a.txt").write_text("hello world\nmore text\n" * 200)
    made = run_cli("source=file", "source.path=a.txt", "tokenizer=bpe",
                   "tokenizer.vocab_size=260", "out_dir=src", cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    with open(tmp_path / "src" / "tokenizer.tiktoken", "r+b") as f:
        f.truncate((64 << 20) + 1)  # sparse: nothing written
    done = run_cli("source=file", "source.path=a.txt", "tokenizer=reuse",
                   f"tokenizer.dir={tmp_path / 'src'}", "out_dir=out", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(done, str(tmp_path / "src" / "tokenizer.tiktoken"), "64 MB")
    assert not (tmp_path / "out").exists()


def test_a_regex_of_your_own_that_matches_everything_loses_nothing(tmp_path):
    # the fix the refusal of '[a-z]+' suggests
    done = run_cli("dataset=shakespeare_char", "tokenizer=bpe", "tokenizer.vocab_size=300",
                   "tokenizer.pattern='[a-z]+|\\s+|.'", f"out_dir={tmp_path / 'out'}",
                   cwd=tmp_path, env={"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "corpusprep.inspect", str(tmp_path / "out"),
                           "--verify"], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert "verified: decoding train + val gives back" in done.stdout, done.stderr


def test_without_rustbpe_the_error_says_what_to_install(tmp_path):
    block = tmp_path / "block"
    block.mkdir()
    (block / "rustbpe.py").write_text("raise ImportError('blocked for this test')\n")
    done = run_cli("dataset=shakespeare_char", "tokenizer=bpe", f"out_dir={tmp_path / 'out'}",
                   cwd=tmp_path, env={"PYTHONPATH": str(block),
                                      "CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert_one_line_error(done, "pip install 'corpusprep[train]'")


_PLANTED_RUSTBPE = """
class Tokenizer:
    def train_from_iterator(self, units, vocab_size, pattern):
        for _ in units:
            pass

    def get_mergeable_ranks(self):
        return [(list(bytes([i])), i) for i in range(256)] + [(list(b"planted"), 256)]
"""


def test_the_training_imports_the_rustbpe_the_driver_found_with_pythonsafepath(
    tmp_path, monkeypatch
):
    """An attack: the training process's boot dropped its sys.path[0], taking it for the
    working folder `python -c` puts there; with PYTHONSAFEPATH=1 (a setting for safety)
    nothing is put there, and the first folder of the driver's path went instead: rustbpe
    installed there (pip install --target, PYTHONPATH) was "No module named 'rustbpe'"
    in the training process, a traceback, though the driver had found it."""
    from corpusprep.tokenizers import _bpe_training

    (tmp_path / "rustbpe.py").write_text(_PLANTED_RUSTBPE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    tokens = _bpe_training.train(["some text\n"], 257, "[\\s\\S]")
    assert tokens[-1] == b"planted"


_MERGING = """
import random, signal, sys, time
sys.path.insert(0, {repo!r})
from corpusprep.sample import Sample
from corpusprep.tokenizers.bpe import BpeTokenizer

random.seed(0)
words = ["".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(random.randint(6, 14)))
         for _ in range(300_000)]
units = [" ".join(words[i : i + 100]) + "\\n" for i in range(0, len(words), 100)]

def stop(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGALRM, stop)
sent = time.monotonic() + {after}  # the signal comes then; its handler when it can run
signal.setitimer(signal.ITIMER_REAL, {after})
try:
    BpeTokenizer(vocab_size=20_000).fit("", sample=Sample(units=units))
    print("trained in", time.monotonic() - sent + {after})
except KeyboardInterrupt:
    print("interrupted after", time.monotonic() - sent)
"""


@pytest.mark.parametrize("after", [0.05, 0.6])  # sending the sample; merging (2 MB, 0.5 s)
def test_a_signal_while_rustbpe_merges_holding_the_gil_is_acted_on_at_once(after):
    """rustbpe lets go of the GIL only while it counts: its merge loop (seconds to minutes
    on a big sample, 1.5 s here) holds it, and Python runs a signal's handler only in a
    thread holding it, so a Ctrl-C or SIGTERM then waited for the training to end. The
    training runs in a process of its own, waited on: acted on at once in each phase."""
    done = subprocess.run([sys.executable, "-c", _MERGING.format(repo=str(REPO), after=after)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "interrupted after" in done.stdout, done.stdout + done.stderr
    assert float(done.stdout.split()[-1]) < 0.3, done.stdout


def _training_process(driver: subprocess.Popen, seconds: float = 60):
    """The driver's training process (tokenizers/_bpe_training.py), once it has started."""
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and driver.poll() is None:
        for child in psutil.Process(driver.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(arg.endswith("_bpe_training.py") for arg in child.cmdline()):
                    return child
        time.sleep(0.02)
    raise AssertionError("no training process")


def _ends(process, seconds: float) -> bool:
    """Whether a process that is not ours ends within `seconds` (a zombie no init reaped
    has ended)."""
    import psutil

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.01)
    return False


def _many_words(path: Path) -> None:
    random.seed(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(random.choice(letters) for _ in range(random.randint(6, 14)))
             for _ in range(300_000)]  # fmt: skip
    path.write_text("".join(" ".join(words[i : i + 100]) + "\n" for i in range(0, 300_000, 100)))


@pytest.mark.slow
def test_a_training_killed_by_the_kernel_is_one_line_with_its_fix(tmp_path):
    """Out of memory, the kernel kills the biggest process: the training's. One line names
    the key that bounds its memory."""
    _many_words(tmp_path / "t.txt")
    p = subprocess.Popen([sys.executable, "-m", "corpusprep", "source=file", "source.path=t.txt",
                          "tokenizer=bpe", "tokenizer.vocab_size=30000", "out_dir=out"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _training_process(p).kill()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    done = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    assert_one_line_error(done, "training was killed", "tokenizer.train_chars=")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_driver_killed_while_it_trains_takes_the_training_with_it(tmp_path):
    """A SIGKILLed driver cannot stop its training process: it stops itself (Linux's
    parent-death signal), not minutes later, when its answer finds no one to read it."""
    _many_words(tmp_path / "t.txt")
    p = subprocess.Popen([sys.executable, "-m", "corpusprep", "source=file", "source.path=t.txt",
                          "tokenizer=bpe", "tokenizer.vocab_size=30000", "out_dir=out"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        training = _training_process(p)
        time.sleep(0.5)  # it has read the sample (3 MB): it merges, for a second or more
        p.kill()
        p.wait()
        assert _ends(training, 0.5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_a_sigterm_while_the_bpe_trains_is_acted_on_at_once(tmp_path, shakespeare):
    """An attack: Python acts on a signal only between its own steps, so a SIGTERM (or
    Ctrl-C) waited for rustbpe's training to end: seconds here, minutes on a big sample.
    The training's line is still drawn meanwhile. (It hung for good when the signal came
    as the encoding began: test_distributed's big-task test.)"""
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios
    import time

    (tmp_path / "t.txt").write_text(shakespeare.read_text(encoding="utf-8") * 16)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    screen, terminal = pty.openpty()  # stderr a terminal: the training's line is drawn
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 wide
    p = subprocess.Popen([sys.executable, "-m", "corpusprep", "source=file", "source.path=t.txt",
                          "tokenizer=bpe", "tokenizer.vocab_size=16384", "out_dir=out"],
                         cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                         stderr=terminal)  # fmt: skip
    os.close(terminal)

    def shown(seconds: float) -> bytes:
        got, end = b"", time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([screen], [], [], 0.2)[0]:
                try:
                    got += os.read(screen, 1 << 16)
                except OSError:  # the process ended
                    break
        return got

    try:
        said, deadline = b"", time.monotonic() + 120
        while b"train tokenizer" not in said and time.monotonic() < deadline:
            said += shown(1)
        assert b"train tokenizer" in said, said[-2000:]
        more = shown(1.2)  # training: its line redrawn meanwhile
        assert b"train tokenizer" in more, more[-2000:]
        assert p.poll() is None, "the training ended before the signal: a bigger corpus"
        p.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        p.wait(timeout=60)
        assert p.returncode == 143
        assert time.monotonic() - sent < 1  # before: when the training ended
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(screen)
    assert not (tmp_path / "out" / "train.bin").exists()

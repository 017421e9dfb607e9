"""Every user mistake: one clear line, non-zero exit, no traceback, nothing written."""

from __future__ import annotations

import os

import pytest
from helpers import REPO, assert_one_line_error, run_cli


@pytest.fixture
def work(tmp_path):
    (tmp_path / "good.txt").write_text("some text\nmore text\n" * 50)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ok\n".encode("latin-1") * 3)
    # a lead byte, ASCII, then a continuation byte: valid once the ASCII is dropped (as
    # the scan does), so only the encode pass's decoding finds it
    (tmp_path / "sneaky.txt").write_bytes(b"ok\n" * 5000 + b"ab\xc3x\xa9\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "control.jsonl").write_bytes(b'{"text": "a"}\n{"text": "a\tb"}\n')
    (tmp_path / "sk").mkdir()
    (tmp_path / "sk" / "a.txt").write_bytes(b"bad \xff one")
    (tmp_path / "sk" / "b.txt").write_text("good text here, no marker\n")
    (tmp_path / "surrogate.jsonl").write_bytes(b'{"text": "a\\ud800b"}\n{"text": "ok"}\n')
    (tmp_path / "tiny.txt").write_text("ab")
    (tmp_path / "wide.txt").write_text("".join(chr(c) for c in range(0x10000, 0x10000 + 70_000)))
    (tmp_path / "program").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "docs.jsonl").write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(50)))
    (tmp_path / "made").mkdir()  # an output folder's files, as a user may name them
    (tmp_path / "made" / "manifest.json").write_text("{}")
    (tmp_path / "made" / "val.bin").write_bytes(b"\0\0")
    return tmp_path


CASES = {
    "missing path": (["source=file", "source.path=nope.txt"], ["nope.txt", "no such file"]),
    "directory": (["source=file", "source.path=folder"], ["folder", "source=files"]),
    "empty file": (["source=file", "source.path=empty.txt"], ["empty.txt", "empty"]),
    "invalid utf-8": (
        ["source=file", "source.path=latin1.txt"],
        ["latin1.txt", "not valid UTF-8 at byte 3 ", "0xe9"],
    ),
    "invalid utf-8 the scan lets pass": (
        ["source=file", "source.path=sneaky.txt"],
        ["sneaky.txt", "not valid UTF-8 at byte 15002 ", "0xc3"],
    ),
    "a lone surrogate in a JSON text": (  # found by an attack: it named no fix
        ["source=file", "source.path=surrogate.jsonl", "tokenizer=byte"],
        ["surrogate.jsonl:1", "lone surrogate", "fix or remove it", "source.skip_invalid=true"],
    ),
    # found by an attack: '\n\n' in quotes is a backslash and an n; the run then said only
    # that the split left train empty
    "a document end written as backslash-n": (
        ["source=file", "source.path=good.txt", 'source.doc_end="\\n\\n"'],
        [
            "good.txt: source.doc_end=",
            "leaves it one document",
            "split_by=position",
            "$'source.doc_end=\"\\n\\n\"'",
        ],
    ),
    "a document end holding a quote": (
        ["source=file", "source.path=good.txt", 'source.doc_end="it\'s"'],
        ['source.doc_end="it\'s" leaves it one document'],
    ),
    "a document separator that never occurs": (
        ["source=file", "source.path=good.txt", "source.doc_separator=@@"],
        ["good.txt: source.doc_separator='@@' leaves it one document", "!$'", "!occurs"],
    ),
    # found by an attack: the only document left was another file's, the other skipped
    "one document left after skipping": (
        ["source=files", "source.glob=sk/*.txt", "source.doc_end=XYZ", "source.skip_invalid=true"],
        ["1 document cannot be split by document", "split_by=position", "!doc_end"],
    ),
    "a document separator written as backslash-n": (  # a line of its own: no bash advice
        ["source=file", "source.path=good.txt", 'source.doc_separator="\\n"'],
        [
            "leaves it one document",
            "a separator is a line of its own",
            "!$'",
            "'source.doc_separator=\"<|endoftext|>\"'",
        ],  # fmt: skip
    ),
    # found by an attack: pasted, the advice gave another value (bash and Hydra read $, a
    # trailing backslash, \\\\), so none is given for such values
    "a document end with more than bash's escapes gets no $'...' advice": (
        ["source=file", "source.path=good.txt", 'source.doc_end="a\\\\n\\n"'],
        ["leaves it one document", "!$'"],
    ),
    "a document end's advice is its own value": (
        ["source=file", "source.path=good.txt", 'source.doc_end="</doc>\\n"'],
        ["$'source.doc_end=\"</doc>\\n\"'"],
    ),
    "unknown dataset": (["dataset=nope"], ["dataset=nope", "shakespeare_char"]),
    "shuffle with a split by hash": (
        ["source=file", "source.path=docs.jsonl", "split_by=hash", "order=shuffle"],
        ["order=shuffle", "split_by=document", "no permutation"],
    ),
    "shuffle with documents split by position": (
        ["source=file", "source.path=docs.jsonl", "split_by=position", "order=shuffle"],
        ["order=shuffle", "split_by=document", "through a document"],
    ),
    "unknown source": (["source=nope"], ["source=nope", "file", "url"]),
    # what Hydra finds itself while composing: its message, in one line
    "a hydra key that does not exist": (
        ["source=file", "source.path=good.txt", "hydra.foo=1"],
        ["Could not override 'hydra.foo'", "+hydra.foo=1"],
    ),
    "deleting a key that does not exist": (
        ["source=file", "source.path=good.txt", "~source.nope"],
        ["'source.nope' does not exist"],
    ),
    "an unknown hydra group option": (
        ["source=file", "source.path=good.txt", "hydra/launcher=nope"],
        ["hydra/launcher/nope", "basic, joblib"],
    ),
    # a quoted 'false' is a string, which would read as true
    "a flag given as a string": (
        ["source=file", "source.path=good.txt", "dry_run='false'"],
        ["dry_run='false'", "true or false"],
    ),
    "quiet as a word": (["source=file", "source.path=good.txt", "quiet=maybe"], ["quiet='maybe'"]),
    "force as a string": (["source=file", "source.path=good.txt", "force='no'"], ["force='no'"]),
    "negative retries": (
        ["source=file", "source.path=good.txt", "executor.retries=-1"],
        ["executor.retries=-1", "0 or more"],
    ),
    "out_dir a list": (["source=file", "source.path=good.txt", "out_dir=[1]"], ["out_dir=[1]"]),
    "environment variable unset": (
        ["source=file", "source.path=good.txt", "name=${oc.env:CORPUSPREP_TEST_UNSET}"],
        [
            "name: the environment variable CORPUSPREP_TEST_UNSET is not set",
            "'name=${oc.env:CORPUSPREP_TEST_UNSET,DEFAULT}'",
        ],
    ),  # fmt: skip
    "source value from an unset variable": (
        ["source=file", "source.path=${oc.env:CORPUSPREP_TEST_UNSET}"],
        [
            "source.path=${oc.env:CORPUSPREP_TEST_UNSET}: a source value may not read",
            "write the value itself",
        ],
    ),  # fmt: skip
    "interpolation of no key": (
        ["source=file", "source.path=good.txt", "split=${nope}"],
        ["split: Interpolation key 'nope' not found", "fix the ${...}"],
    ),
    "text_field of plain text": (
        ["source=file", "source.path=good.txt", "source.text_field=body"],
        ["source.text_field=body: does nothing here", "text", "drop it"],
    ),
    "doc_end of JSON Lines in a dry run": (
        ["source=file", "source.path=control.jsonl", "source.doc_end=x", "dry_run=true"],
        ["source.doc_end='x': does nothing here", "drop it"],
    ),
    "doc_separator of JSON Lines": (
        ["source=file", "source.path=control.jsonl", "source.doc_separator=XX"],
        ["source.doc_separator='XX': does nothing here", "jsonl", "drop it"],
    ),
    "ranks file missing": (
        [
            "source=file",
            "source.path=good.txt",
            "tokenizer=tiktoken",
            "tokenizer.ranks_file=no.tiktoken",
        ],
        ["tokenizer.ranks_file=no.tiktoken: no such file; give the path of a .tiktoken"],
    ),
    "bpe vocab_size with an exponent": (
        ["source=file", "source.path=good.txt", "tokenizer=bpe", "tokenizer.vocab_size=1e3"],
        ["tokenizer.vocab_size=1000.0: must be a whole number", "tokenizer.vocab_size=4096"],
    ),
    "json with a raw control character": (
        ["source=file", "source.path=control.jsonl"],
        ["control.jsonl:2: not valid JSON (Invalid control character, column 12)", "!at,"],
    ),
    "out_dir only spaces": (
        ["source=file", "source.path=good.txt", "out_dir='  '"],
        ["out_dir='  '", "out_dir=PATH"],
    ),
    "name up a folder": (
        ["source=file", "source.path=good.txt", "name=..", "out_dir=data/x"],
        ["name='..'", "folder name"],
    ),
    "name with a line end": (
        ["source=file", "source.path=good.txt", "name='a\nb'"],
        ["name='a\\nb'", "folder name", "no control characters"],
    ),
    "name a path": (["source=file", "source.path=good.txt", "name=a/b"], ["name='a/b'"]),
    "name empty": (["source=file", "source.path=good.txt", "name="], ["name=''"]),
    "name null": (["source=file", "source.path=good.txt", "name=null"], ["name=None"]),
    "unknown tokenizer": (
        ["tokenizer=nope", "dataset=shakespeare_char"],
        ["tokenizer=nope", "char"],
    ),
    # the Hydra-surface attack: "tokenizer: Key 'tokenizer' is not in struct", no fix
    "a group removed": (
        ["source=file", "source.path=good.txt", "~tokenizer"],
        ["~tokenizer: every run needs a tokenizer", "tokenizer=NAME", "char", "tiktoken"],
    ),
    # the Hydra-surface attack: a sweep function's wrong arguments were told to quote
    "a sweep function with wrong arguments": (
        ["source=file", "source.path=good.txt", "split=tag(a,0.8,0.9)"],
        ["split=tag(a,0.8,0.9): cannot parse", "give tag() the arguments", "!quote"],
    ),
    "a needed key removed": (
        ["source=file", "source.path=good.txt", "~split"],
        ["~split: every run needs split (split=0.9 unless set)", "drop ~split"],
    ),
    "unknown in a sweep": (["-m", "tokenizer=char,nope"], ["tokenizer=nope"]),
    "shuffle of a preset's one text, by its URL not the download cache's copy": (
        ["dataset=shakespeare_char", "order=shuffle"],
        [
            "order=shuffle: https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
            "tinyshakespeare/input.txt is one text",
            "!.cache",
        ],
    ),  # fmt: skip
    "split too big": (["source=file", "source.path=good.txt", "split=1.5"], ["split=1.5"]),
    "split zero": (
        ["source=file", "source.path=good.txt", "split=0"],
        ["split=0", "between 0 and 1"],
    ),
    "split not a number": (["source=file", "source.path=good.txt", "split=abc"], ["split='abc'"]),
    "split empties train": (
        ["source=file", "source.path=tiny.txt", "split=0.1"],
        ["tiny.txt", "leaves train empty"],
    ),
    "unknown dtype": (
        ["source=file", "source.path=good.txt", "dtype=int8"],
        ["dtype=int8", "uint32"],
    ),
    "dtype too small": (
        ["source=file", "source.path=wide.txt", "dtype=uint16"],
        ["dtype=uint16", "too small", "69,999", "uint32"],
    ),
    "nothing chosen": ([], ["nothing to prepare", "dataset=", "source=file"]),
    "bad url": (["source=url", "source.url=ftp://x/y"], ["source.url", "http"]),
    "bad sha256": (
        ["source=url", "source.url=http://127.0.0.1:9/x.txt", "source.sha256=abc"],
        ["source.sha256", "64 hex"],
    ),
    "bad workers": (
        ["source=file", "source.path=good.txt", "executor.workers=0"],
        ["executor.workers=0"],
    ),
    # a newcomer: Python's own conversion error, naming a class, and no fix
    "workers not a number": (
        ["source=file", "source.path=good.txt", "executor.workers=abc"],
        ["executor.workers='abc'", "a whole number, 1 or more", "!LocalExecutor", "!literal"],
    ),
    "workers not whole": (
        ["source=file", "source.path=good.txt", "executor.workers=2.5"],
        ["executor.workers=2.5", "a whole number"],
    ),
    "url timeout not a number": (
        ["source=url", "source.url=http://127.0.0.1:9/x.txt", "source.timeout=abc"],
        ["source.timeout='abc'", "a number, more than 0 (seconds)", "!UrlSource"],
    ),
    "url retries not a number": (
        ["source=url", "source.url=http://127.0.0.1:9/x.txt", "source.retries=-1"],
        ["source.retries=-1", "a whole number, 0 or more"],
    ),
    "slurm memory not a number": (
        ["source=file", "source.path=good.txt", "executor=slurm", "executor.mem_gb=lots"],
        ["executor.mem_gb='lots'", "a number, more than 0", "!SlurmExecutor"],
    ),
    "ray cpus not a number": (
        ["source=file", "source.path=good.txt", "executor=ray", "executor.cpus_per_task=0"],
        ["executor.cpus_per_task=0", "more than 0"],
    ),
    # two mistakes at once: the key misspelt, and its source not chosen
    "misspelt key of another source": (
        ["source.pth=good.txt"],
        ["did you mean source.path?", "add source=file before source.path=good.txt"],
    ),
    # a required ("???") key unset: its name and an example, not OmegaConf's message
    "files without glob": (["source=files"], ["source.glob is required: set source.glob="]),
    "hf without dataset": (["source=hf"], ["source.dataset is required: set source.dataset="]),
    "hf tokenizer without path": (
        ["source=file", "source.path=good.txt", "tokenizer=hf"],
        ["tokenizer.path is required: set tokenizer.path=", "!???"],
    ),
    "reuse without dir": (
        ["source=file", "source.path=good.txt", "tokenizer=reuse"],
        ["tokenizer.dir is required: set tokenizer.dir=", "!???"],
    ),
    # found by a newcomer's attack: both said 'no readable manifest.json', as for a folder of
    # other files, where the folder is not there (a run from another folder) or is a file's
    "reuse of a folder not there": (
        ["source=file", "source.path=good.txt", "tokenizer=reuse", "tokenizer.dir=data/bpe"],
        ["tokenizer.dir=data/bpe: no such folder (from ", "in full"],
    ),
    "reuse of a file in an output folder": (
        ["source=file", "source.path=good.txt", "tokenizer=reuse", "tokenizer.dir=made/val.bin"],
        ["tokenizer.dir=made/val.bin: a file, not an output folder", "tokenizer.dir=made"],
    ),
    # found by a newcomer's attack: source.headers=5 was advised +source.headers=5, which
    # then said "'int' object has no attribute 'items'"
    "headers that are not headers": (
        ["source=url", "source.url=http://127.0.0.1:9/x.txt", "+source.headers=5"],
        ["source.headers: must be HTTP headers", "+source.headers.Accept=text/plain'", "!'items'"],
    ),
    # nothing listens there: ray.init retried for ever, holding out_dir's lock
    "ray address nothing answers": (
        ["source=file", "source.path=good.txt", "executor=ray", "executor.address=127.0.0.9:1"],
        ["executor.address=127.0.0.9:1: nothing answers", "ray start --head"],
    ),
    # a word without "=": Hydra said "missing EQUAL" and advised quoting
    "a command that is not one": (
        ["inspect", "out"],
        ["inspect: not a command", "python -m corpusprep.inspect DIR", "!quote"],
    ),
    "a dataset's name alone": (
        ["shakespeare_char"],
        ["shakespeare_char: not an override", "dataset=shakespeare_char"],
    ),
    "a group's name alone": (["tokenizer"], ["tokenizer=NAME", "tiktoken"]),
    "a file's name alone": (["good.txt"], ["source=file source.path=good.txt"]),
    "an empty char separator": (
        ["source=file", "source.path=good.txt", "tokenizer.separator="],
        ["tokenizer.separator=''", "non-empty"],
    ),
    "out_dir under a file": (
        ["source=file", "source.path=good.txt", "out_dir=a_file/sub"],
        ["out_dir=a_file/sub", "is a file, not a folder"],
    ),
    "out_dir is a file": (
        ["source=file", "source.path=good.txt", "out_dir=a_file"],
        ["out_dir=a_file", "is a file, not a folder"],
    ),
    # the first ten minutes (issue 12): what a newcomer types
    "misspelt key": (["dataset=shakespeare_char", "splt=0.8"], ["splt", "did you mean split?"]),
    "misspelt key, as Hydra advises": (
        ["dataset=shakespeare_char", "+splt=0.8"],
        ["splt", "did you mean split?"],
    ),
    "a known key with +": (
        ["source=file", "source.path=good.txt", "+split=0.8"],
        ["+split=0.8", "without +", "split=0.8"],
    ),
    "misspelt group key": (
        ["dataset=shakespeare_char", "executor.wrkers=2"],
        ["executor.wrkers", "did you mean executor.workers?"],
    ),
    "misspelt group": (
        ["source=file", "source.path=good.txt", "tokenizr=bpe"],
        ["tokenizr", "did you mean tokenizer?"],
    ),  # fmt: skip
    "misspelt group of a key": (
        ["source=file", "source.path=good.txt", "tokenizr.vocab_size=512"],
        ["tokenizr.vocab_size", "did you mean tokenizer.vocab_size?"],
    ),
    "misspelt group, misspelt key": (
        ["source=file", "source.path=good.txt", "tokenizr.separater=x"],
        ["tokenizr.separater", "did you mean tokenizer.separator?"],
    ),
    "misspelt group, unknown key": (
        ["source=file", "source.path=good.txt", "+tokenizr.x=1"],
        ["tokenizr.x", "did you mean tokenizer? its keys are"],
    ),
    "misspelt preset group": (["datset=shakespeare_char"], ["datset", "did you mean dataset?"]),
    "a key inside a key": (
        ["source=file", "source.path=good.txt", "source.foo.bar=1"],
        ["source.foo.bar", "!did you mean source.bar"],
    ),
    "misspelt key that looks like a secret": (  # it was "token: ***", the advice hidden
        ["source=file", "source.path=good.txt", "token=char"],
        ["token", "did you mean tokenizer?"],
    ),
    "path without source=file": (
        ["source.path=good.txt"],
        ["source.path", "source=url does not take path", "source=file"],
    ),
    # found by an attack: it said to add source=files, which then failed on source.path
    "glob beside source=file's path": (
        ["source=file", "source.path=good.txt", "source.glob=sk/*.txt"],
        [
            "source=file does not take glob",
            "drop source.glob=sk/*.txt to read source.path",
            "or drop source.path=good.txt and add source=files before source.glob=sk/*.txt",
        ],
    ),  # fmt: skip
    "a key the tokenizer does not take": (
        ["dataset=shakespeare_char", "tokenizer.encoding=gpt2"],
        ["tokenizer.encoding", "tokenizer=char", "tokenizer=tiktoken"],
    ),
    "an unknown tokenizer key": (
        ["dataset=shakespeare_char", "+tokenizer.nope=1"],
        ["tokenizer.nope", "separator"],
    ),
    "a key of no group": (["dataset=shakespeare_char", "dataset.x=1"], ["dataset.x", "split"]),
    "commas without -m": (
        ["source=file", "source.path=good.txt", "split=0.8,0.9"],
        ["split=0.8,0.9", "add -m"],
    ),
    "shard_tokens with nanogpt": (
        ["source=file", "source.path=good.txt", "shard_tokens=1000"],
        ["shard_tokens", "format=nanogpt", "format=llmc"],
    ),
    "shard_tokens with megatron": (
        ["source=file", "source.path=good.txt", "format=megatron", "shard_tokens=1000"],
        ["shard_tokens", "format=megatron"],
    ),
    "val_size with one text": (
        ["source=file", "source.path=good.txt", "val_size=10"],
        ["val_size=10", "split_by=position", "split_by=document"],
    ),
    "a binary file": (
        ["source=file", "source.path=program"],
        ["program", "binary", "!iconv", "among other files"],  # skip_invalid: not for one
    ),
    "a fifo": (["source=file", "source.path=fifo"], ["fifo", "not a regular file"]),
    # found by an attack: Hydra made hydra.run.dir (and its parents) before the run, which
    # then failed, and the empty folders stayed; one it could not make was a traceback
    "a mistake with a hydra.run.dir": (
        ["source=file", "source.path=good.txt", "split=1.5", "hydra.run.dir=runs/one"],
        ["split=1.5"],
    ),
    # found by an attack: a value's line end was echoed as it was (two lines), and an
    # escape sequence reached the terminal (a window title)
    "a line end in an override": (
        ["source=file", "source.path=good.txt", "name=a\nb"],
        ["name=a\\nb", "quote"],
    ),
    "an escape sequence in an override": (
        ["source=file", "source.path=good.txt", "name=a\x1b]0;x\x07"],
        ["name=a\\x1b]0;x\\x07", "!\x1b"],
    ),
    # found by an attack: the run made data/, then failed to make data/<name> in it, and
    # the empty data/ stayed
    "an out_dir whose name is too long": (
        ["source=file", "source.path=good.txt", "out_dir=data/" + "x" * 300],
        ["cannot create it (File name too long)"],
    ),
    "a hydra.run.dir under a file": (
        ["source=file", "source.path=good.txt", "hydra.run.dir=a_file/run"],
        ["hydra.run.dir=a_file/run", "cannot make it", "out_dir"],
    ),
    "a device": (["source=file", "source.path=/dev/zero"], ["/dev/zero", "not a regular file"]),
    "tiktoken offline": (  # the proxy is a dead port on loopback: no traffic leaves
        [
            "source=file",
            "source.path=good.txt",
            "tokenizer=tiktoken",
            "tokenizer.encoding=cl100k_base",
        ],
        [
            "tokenizer.encoding=cl100k_base",
            "cannot reach openaipublic.blob.core.windows.net",
            "TIKTOKEN_CACHE_DIR",
            "tokenizer.ranks_file",
        ],
        {
            "TIKTOKEN_CACHE_DIR": "empty_cache",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "",
        },
    ),  # fmt: skip
}


def offline_env(work, env):
    if env is None:
        return None
    (work / "empty_cache").mkdir(exist_ok=True)
    cache = str(work / "empty_cache")
    return {**os.environ, **{k: (cache if v == "empty_cache" else v) for k, v in env.items()}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_mistake(work, case):
    args, fragments, *env = CASES[case]
    env = offline_env(work, env[0] if env else None)
    before = sorted(p.name for p in work.iterdir())
    if not any(a.startswith("out_dir=") for a in args):
        args = [*args, "out_dir=out"]
    result = run_cli(*args, cwd=work, env=env)
    assert result.returncode == 1, result.stderr
    assert_one_line_error(result, *[f for f in fragments if not f.startswith("!")])
    for absent in [f[1:] for f in fragments if f.startswith("!")]:
        assert absent not in result.stderr, result.stderr
    assert sorted(p.name for p in work.iterdir()) == before  # nothing written, not even out_dir


def test_hydra_grammar_errors_still_have_no_traceback(work):
    r = run_cli("source=file", "source.path=good.txt", "nosuchkey=1", cwd=work)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "nosuchkey" in r.stderr


def test_an_unreadable_file_among_many_is_one_line(work, monkeypatch):
    """A file a glob lists but nobody may read (chmod 000; root reads it anyway, so the
    refusal is what the first read raises)."""
    from corpusprep import sources
    from corpusprep.errors import UserError
    from corpusprep.sources import ReadOptions, input_files

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sources, "_peek", refuse)
    with pytest.raises(UserError, match=r"good.txt: cannot read it \(Permission denied\)"):
        input_files([work / "good.txt"], ReadOptions())


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["source=file", "source.path=good.txt", "--bogus"], ["--bogus: not an option"]),
        (["--dataset=shakespeare_char"], ["not an option", "(dataset=shakespeare_char)"]),
        (["--cfg"], ["--cfg", "expected one argument", "--help"]),
        (["dataset=shakespeare_char", "--cfg", "jobs"], ["invalid choice: 'jobs'", "'job'"]),
        # the Hydra-surface attack: the line stopped at "Config search path:", no paths, no fix
        (["dataset=shakespeare_char", "--config-name", "nope"],
         ["primary config 'nope' in the config search path (", "conf)",
          "leave out --config-name"]),
        (["dataset=shakespeare_char", "--config-path", "/tmp"],
         ["primary config 'config'", "/tmp", "leave out --config-name and --config-path"]),
    ],
)  # fmt: skip
def test_a_flag_hydra_does_not_take_is_one_line(work, args, fragments):
    """argparse printed its usage (8 lines) before its message, and exited with 2."""
    r = run_cli(*args, cwd=work)
    assert r.returncode == 1, r.stderr
    assert_one_line_error(r, *fragments)


def test_version_is_corpusprep_s(work):
    import corpusprep

    r = run_cli("--version", cwd=work)
    assert r.returncode == 0 and r.stdout.startswith(f"corpusprep {corpusprep.__version__} ")


def test_a_warning_before_hydras_error_is_not_the_message():
    import io

    from corpusprep.app import _HydraStderr

    held = _HydraStderr(io.StringIO())
    held.write("/x/hydra/_internal/callbacks.py:28: UserWarning: Callback raised\n")
    held.write("  warnings.warn(\n")
    held.write("Could not override 'tokenizer.fail_after'.\nTo append use +tokenizer.x=1\n")
    held.write("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    assert held.error() == "Could not override 'tokenizer.fail_after'; To append use +tokenizer.x=1"


@pytest.mark.parametrize("key", ["out_dir=2024", "name=1.5"])
def test_a_number_is_a_folder_name(work, key):
    r = run_cli("source=file", "source.path=good.txt", key, "quiet=true", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (work / ("2024" if key.startswith("out_dir") else "data/1.5") / "train.bin").is_file()


@pytest.mark.parametrize("args, key", [
    (["source=file", "source.path=2024"], "source.path"),
    (["source=files", "source.glob=2024"], "source.glob"),
    (["source=files", "source.glob=[good.txt,2024]"], "source.glob"),
    (["source=files", "source.glob=good.txt", "source.exclude=2024"], "source.exclude"),
    (["source=file", "source.path=good.txt", "tokenizer=tiktoken", "tokenizer.ranks_file=2024"],
     "tokenizer.ranks_file"),
    (["source=file", "source.path=good.txt", "tokenizer=sentencepiece", "tokenizer.model=2024"],
     "tokenizer.model"),
    (["dataset=shakespeare_char", "source.cache_dir=2024"], "source.cache_dir"),
])  # fmt: skip
def test_a_path_hydra_reads_as_a_number_says_how_to_quote_it(work, args, key):
    """Found by a newcomer's attack: a file named 2024 (source.path=2024) was Python's
    'expected str, bytes or os.PathLike object, not int', naming neither the key nor a fix,
    and a list holding one (source.glob=[good.txt,2024]) a traceback."""
    (work / "2024").write_text("some text of a file named by a year\n" * 100)
    r = run_cli(*args, "out_dir=out", "quiet=true", cwd=work)
    assert_one_line_error(r, f"{key}=2024: ", "reads this as a number", f"\"{key}='2024'\"")
    fixed = [a.replace("2024", "'2024'") if a.startswith(key) else a for a in args]
    r = run_cli(*fixed, "out_dir=out", "quiet=true", cwd=work)
    assert "reads this as a number" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_document_separator_hydra_reads_as_a_number_is_quoted_as_typed(work):
    r = run_cli("source=file", "source.path=good.txt", "source.doc_separator=1e3", cwd=work)
    assert_one_line_error(r, "source.doc_separator=1e3: ", "\"source.doc_separator='1e3'\"")


@pytest.mark.parametrize("typed", ["1e3", "1_0", "5."])
def test_a_path_hydra_reads_as_a_number_is_quoted_as_typed(work, typed):
    """The quotes advised for source.path=1e3 hold 1e3, the file's name, not 1000.0."""
    (work / typed).write_text("some text of a file named by a number\n" * 100)
    r = run_cli("source=file", f"source.path={typed}", "out_dir=out", cwd=work)
    assert_one_line_error(r, f"source.path={typed}: ", f"\"source.path='{typed}'\"")
    r = run_cli("source=file", f"source.path='{typed}'", "out_dir=out", "quiet=true", cwd=work)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("given", ['out_dir="~/{}"', "out_dir='~/{}'"])
def test_out_dir_under_the_home_folder(work, given):
    """out_dir="~/x" is x in the home folder, as the shell and source.path read it: it
    made a folder named ~ in the working directory, which a later rm -rf ~ takes for home."""
    home = work / "home"
    home.mkdir()
    r = run_cli("source=file", "source.path=good.txt", given.format("runs/a"), "quiet=true",
                cwd=work, env={"HOME": str(home)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (home / "runs" / "a" / "train.bin").is_file()
    assert not (work / "~").exists()


def test_a_number_setting_from_the_environment_is_taken(work):
    """${oc.env:W} gives a string: a string that spells the number is that number (a
    review: executor.workers='2' was refused, where keys.md documents ${oc.env:...})."""
    r = run_cli("source=file", "source.path=good.txt", "executor.workers=${oc.env:W}",
                "out_dir=out", "quiet=true", cwd=work, env={"W": "2"})  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("value, whole, ok", [
    ("2", True, 2), (3, True, 3), ("2.5", True, None), (2.5, True, None), (True, True, None),
    ("30", False, 30.0), (0.5, False, 0.5), (10**400, False, None), ("1e400", False, None),
    (float("nan"), False, None), ("abc", False, None), (None, False, None),
])  # fmt: skip
def test_checked_number(value, whole, ok):
    from corpusprep.errors import UserError, checked_number

    if ok is None:
        with pytest.raises(UserError, match=r"^k=.*: must be a (whole )?number, more than 0$"):
            checked_number(value, "k", whole=whole, above=True)
    else:
        assert checked_number(value, "k", whole=whole, above=True) == ok


@pytest.mark.parametrize("args, fragments", [
    (["--force"], ["--force: not an option", "(force=true)"]),
    (["--dry-run"], ["(dry_run=true)"]),
    (["-m", "dataset=shakespeare_char", "split=0.8,0.9", "--cfg", "job"],
     ["--multirun and --cfg: give one of them at a time"]),
])  # fmt: skip
def test_flags_a_user_may_mean(work, args, fragments):
    """A review: --force was advised dataset=...; -m with --cfg was Hydra's traceback."""
    assert_one_line_error(run_cli(*args, cwd=work), *fragments)


def test_version_abbreviated(work):
    assert run_cli("--vers", cwd=work).stdout.startswith("corpusprep ")


@pytest.mark.parametrize("args, fragments", [
    (["source=file", "source.path=good.txt", "--cfg", "job", "tokenizer=byte"],
     ["tokenizer=byte: an override after a flag", "before the flags"]),
    (["source=file", "source.path=good.txt", "--resolve"], ["--resolve: only with --cfg"]),
    (["--help", "--resolve"], ["Missing mandatory value: source.url", "choose dataset=NAME"]),
    (["hydra.job.chdir=${oc.decode:abc}", "--cfg", "hydra", "--resolve"],
     ["Value 'abc' is not a valid bool", "!object_type"]),
    (["hydra.run.dir=${nope}", "dataset=shakespeare_char"], ["Interpolation key 'nope'"]),
    (["--info", "split=0.8"], ["invalid choice: 'split=0.8'", "put the overrides before"]),
    (["--dry-run=true"], ["(dry_run=true)"]),
    (["--experimental-rerun=x.pickle"], ["--experimental-rerun: not taken", "unpickles"]),
    (["tokenizer=null"], ["tokenizer=null: no such tokenizer; choose one of", "!Traceback"]),
    (["--shell-completion"], ["give what to do", "-sc install=bash", "!Traceback", "!File \""]),
    # found by an attack: a query typed by hand (no COMP_LINE) was a KeyError traceback,
    # and a shell Hydra has no completion for listed its shells on lines of their own
    (["-sc", "query=bash"], ["-sc query=bash", "COMP_LINE", "-sc install=bash", "!Traceback"]),
    (["-sc", "install=tcsh"], ["-sc install=tcsh", "bash, fish, zsh"]),
    # no command: "Expecting one subcommand from [...]", or "foo: not an override"
    (["-sc"], ["-sc: give what to do", "-sc install=bash"]),
    (["-sc", "foo"], ["-sc foo: give what to do", "install=SHELL"]),
    (["=5"], ["!Traceback"]),
])  # fmt: skip
def test_command_lines_hydra_answered_with_usage_or_a_traceback(work, args, fragments):
    """An attack: argparse's usage (8 lines), Hydra's ValueError, a traceback of Hydra's
    own as the 'one line' (its first two lines), and a flag that unpickles a file."""
    r = run_cli(*args, cwd=work)
    assert_one_line_error(r, *[f for f in fragments if not f.startswith("!")])
    for absent in (f[1:] for f in fragments if f.startswith("!")):
        assert absent not in r.stderr, r.stderr


def test_a_presets_val_size_that_does_nothing_says_how_to_unset_it(work):
    """Found by a newcomer's attack: dataset=shakespeare_llmc split_by=position said 'drop
    val_size', which the command line did not give: the preset sets it."""
    args = ["dataset=shakespeare_llmc", "split_by=position", "out_dir=out"]
    assert_one_line_error(run_cli(*args, cwd=work), "val_size=32768: does nothing", "val_size=null")
    assert run_cli(*args, "val_size=null", "quiet=true", cwd=work).returncode == 0
    # unset the other way, the same run: up to date (its fingerprint took the key's absence
    # for another setting than null, and the run was made again)
    r = run_cli(*args, "~val_size", cwd=work)
    assert r.returncode == 0 and "is up to date" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args, fix", [
    (["dataset=shakespeare_llmc"], "split_by=position val_size=null"),
    (["source=file", "source.path=docs.jsonl", "split_by=tail", "val_size=20"],
     "split_by=position val_size=null"),
    (["source=file", "source.path=docs.jsonl", "split_by=document", "val_size=5"],
     "val_size=null"),
])  # fmt: skip
def test_a_split_that_does_nothing_is_refused(work, args, fix):
    """Found by a newcomer's attack: dataset=shakespeare_llmc split=0.8 ran, and wrote the
    32,768-token val of split_by=head (val_size alone sizes val there), saying nothing."""
    from omegaconf import OmegaConf

    from corpusprep.prepare import DEFAULT_SPLIT

    assert OmegaConf.load(REPO / "conf" / "config.yaml").split == DEFAULT_SPLIT
    r = run_cli(*args, "split=0.8", "out_dir=out", cwd=work)
    assert_one_line_error(r, "split=0.8: does nothing", fix)
    assert run_cli(*args, "split=0.8", *fix.split(), "out_dir=out", "quiet=true",
                   cwd=work).returncode == 0  # fmt: skip


@pytest.mark.parametrize("word, flag", [("help", "--help"), ("version", "--version")])
def test_a_command_word_for_a_flag_names_the_flag(work, word, flag):
    """Found by a newcomer's attack: `python -m corpusprep help` (as `git help`) was advised
    'did you mean dataset=shakespeare_char?'."""
    r = run_cli(word, cwd=work)
    assert_one_line_error(r, f"{word}: not a command", f"python -m corpusprep {flag}")
    assert "dataset=shakespeare_char" not in r.stderr, r.stderr
    assert run_cli(flag, cwd=work).returncode == 0


def test_deleting_a_key_that_is_unset_already_says_so(work):
    """Found by a newcomer's attack: ~val_size (to unset it) said Hydra's "'val_size' does
    not exist", of a key --help lists: it is null, unset, already."""
    r = run_cli("source=file", "source.path=good.txt", "~val_size", "out_dir=out", cwd=work)
    assert_one_line_error(r, "~val_size: val_size is unset (null) already", "drop ~val_size")
    assert "does not exist" not in r.stderr, r.stderr
    r = run_cli("~source.nope", cwd=work)  # a key that is not there: Hydra's line, as before
    assert_one_line_error(r, "'source.nope' does not exist")


def test_a_path_with_spaces_the_shell_cut_is_shown_quoted(work):
    """Found by a newcomer's attack: source.path=My Documents/a.txt, unquoted, was advised
    'did you mean dataset=shakespeare_char?'."""
    (work / "My Big Documents").mkdir()
    (work / "My Big Documents" / "a.txt").write_text("some text in a folder with spaces\n" * 99)
    r = run_cli("source=file", "source.path=My", "Big", "Documents/a.txt", "out_dir=out", cwd=work)
    assert_one_line_error(r, "did you mean 'source.path=My Big Documents/a.txt'?", "spaces")
    assert "dataset=shakespeare_char" not in r.stderr, r.stderr
    r = run_cli("source=file", "source.path=My Big Documents/a.txt", "out_dir=out", "quiet=true",
                cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    # a secret's value cut so: none of its words is shown
    r = run_cli("source=url", "source.url=http://127.0.0.1:9/x.txt",
                "+source.headers.Authorization=Bearer", "hunter2", cwd=work)  # fmt: skip
    assert_one_line_error(r, "+source.headers.Authorization=***: its value holds a space", "quotes")
    assert "hunter2" not in r.stderr + r.stdout, r.stderr
    r = run_cli("source=url", "source.url=http://127.0.0.1:9/x.txt",
                "+source.headers.Authorization=", "hunter2", cwd=work)  # fmt: skip
    assert_one_line_error(r, "+source.headers.Authorization=***: its value holds a space")
    assert "hunter2" not in r.stderr + r.stdout, r.stderr


@pytest.mark.parametrize("given", ["tokenizer.separator=<|sep|>", "out_dir=o~x", "out_dir=o(1)"])
def test_an_override_hydra_cannot_parse_is_shown_quoted(work, given):
    """Found by a newcomer's attack: the advice was a template ('key="<|endoftext|>"'), and
    a folder named o(1) was advised to 'give o() the arguments Hydra's grammar asks for'."""
    key, value = given.split("=", 1)
    r = run_cli("source=file", "source.path=good.txt", given, cwd=work)
    assert_one_line_error(r, f"{given}: cannot parse this override", f"""'{key}="{value}"'""")
    assert "the arguments" not in r.stderr, r.stderr
    r = run_cli("source=file", "source.path=good.txt", f'{key}="{value}"', "quiet=true", cwd=work)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args, meant", [
    (["split", "=", "0.8"], "split=0.8"),
    (["split", "=0.8"], "split=0.8"),
    (["split=", "0.8"], "split=0.8"),
    (["split", "0.8"], "split=0.8"),
    (["source.path", "good.txt"], "source.path=good.txt"),
])  # fmt: skip
def test_an_override_written_with_spaces_is_named_joined(work, args, meant):
    """Found by a newcomer's attack: `split = 0.8` (spaces around =, as other tools take it)
    was advised `did you mean dataset=shakespeare_char?`, which has nothing to do with it."""
    r = run_cli("source=file", "source.path=good.txt", *args, "out_dir=out", cwd=work)
    assert_one_line_error(r, f"did you mean {meant}?", "no spaces around =")
    assert "dataset=shakespeare_char" not in r.stderr, r.stderr
    fixed = [
        a for a in ("source=file", "source.path=good.txt") if a.split("=")[0] != meant.split("=")[0]
    ]
    assert run_cli(*fixed, meant, "out_dir=out", "quiet=true", cwd=work).returncode == 0


@pytest.mark.parametrize("args", [
    ["--help", "--resolve", "dataset=shakespeare_char"],  # Hydra prints its help first
    ["--help", "--cfg", "job", "-m"],
    ["dataset=[shakespeare_char]", "--cfg", "job"],  # a list of a group's configs
])  # fmt: skip
def test_valid_command_lines_a_review_found_refused(work, args):
    r = run_cli(*args, cwd=work)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_a_config_dir_that_is_not_there_is_named_with_a_fix(work):
    """Found by a newcomer's attack: Hydra's 'Additional config directory ... not found', from
    another folder than docs/plugins.md's, named no fix."""
    r = run_cli("--config-dir", "my_conf", "dataset=shakespeare_char", cwd=work)
    assert_one_line_error(r, f"--config-dir {work / 'my_conf'}: no such folder",
                          "the folder that holds your configs")  # fmt: skip


def test_version_abbreviated_to_three_letters(work):
    assert run_cli("--v", cwd=work).stdout.startswith("corpusprep ")


def test_completing_a_half_typed_key_prints_no_error(work):
    """The shell asks for completions with what is typed so far: splt is no mistake yet."""
    import shutil
    import subprocess

    script = shutil.which("corpusprep")
    if script is None:
        pytest.skip("the corpusprep script is not installed")
    r = subprocess.run([script, "-sc", "query=bash"], cwd=work, capture_output=True,
                       text=True, timeout=120,
                       env={**os.environ, "COMP_LINE": "corpusprep splt=0.8 tok"})  # fmt: skip
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
    assert "tokenizer=" in r.stdout


@pytest.mark.parametrize(
    "fix", [["source=file", "source.path=good.txt"],
            ["source=file", "source=files", "source.glob=docs/*.txt"]],
)  # fmt: skip
def test_both_fixes_of_a_glob_beside_a_path_work(work, fix):
    """What the line for source=file source.path=... source.glob=... offers, followed."""
    (work / "docs").mkdir()
    for name in "ab":
        (work / "docs" / f"{name}.txt").write_text(f"document {name}\n" * 40)
    result = run_cli(*fix, "out_dir=out", "quiet=true", cwd=work)
    assert result.returncode == 0, result.stderr


def test_a_run_leaves_no_empty_hydra_run_dir(work):
    """Found by an attack: `hydra.run.dir=foo` (a Hydra habit) left an empty foo behind, as
    corpusprep writes only to out_dir; what Hydra is asked to write there stays."""
    r = run_cli("source=file", "source.path=good.txt", "out_dir=out", "quiet=true",
                "hydra.run.dir=runs/foo", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (work / "out" / "train.bin").is_file() and not (work / "runs").exists()
    (work / "mine").mkdir()  # a folder that was there before is the user's: it stays
    r = run_cli("source=file", "source.path=good.txt", "out_dir=out", "quiet=true",
                "hydra.run.dir=mine", "hydra.job.chdir=true", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (work / "mine").is_dir()
    r = run_cli("source=file", "source.path=good.txt", "out_dir=out", "quiet=true",
                "hydra.run.dir=runs/kept", "hydra.output_subdir=.hydra", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (work / "runs" / "kept" / ".hydra" / "config.yaml").is_file()


def test_an_empty_hydra_run_dir_is_the_command_folder(work):
    """`hydra.run.dir=` (an unset $VAR in a script) is the command's folder to Hydra: it
    ran, and was then refused as 'cannot make it (a file is there)', a file never there."""
    r = run_cli("source=file", "source.path=good.txt", "out_dir=out", "quiet=true",
                "hydra.run.dir=", cwd=work)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (work / "out" / "train.bin").is_file()


def test_a_run_in_a_hydra_run_dir_another_run_made_and_removed_ends_well(work):
    """Two runs given one hydra.run.dir: the one that made it removes it at its end, empty
    (corpusprep writes only to out_dir), while the other, moved into it by
    hydra.job.chdir=true, still runs there. That one wrote its outputs, then ended with a
    FileNotFoundError traceback (exit 1), going back to the folder gone."""
    import subprocess
    import sys
    import time

    from helpers import FAULTS

    stall = ["tokenizer._target_=fault_tokenizers.StallCharTokenizer", "+tokenizer.delay=0.01"]
    args = ["source=file", "source.path=good.txt", *stall, "hydra.run.dir=runs", "quiet=true"]
    runs = []
    for name, more in (("a", []), ("b", ["hydra.job.chdir=true"])):
        flag = work / f"{name}.stall"
        flag.touch()
        env = {**os.environ, **FAULTS, "CP_TEST_STALL": str(flag)}
        command = [sys.executable, "-m", "corpusprep", *args, *more, f"out_dir=out_{name}"]
        runs.append((flag, subprocess.Popen(command, cwd=work, env=env, text=True,
                                            stderr=subprocess.PIPE)))  # fmt: skip
        deadline = time.monotonic() + 60  # until it stalls, in its run
        while not any((work / f"out_{name}").glob(".cp-*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.05)
    try:
        for flag, proc in runs:  # a ends first, removing runs/, made by it and empty
            flag.unlink()
            proc.wait(timeout=120)
        for _, proc in runs:
            said = proc.stderr.read()
            assert proc.returncode == 0 and "Traceback" not in said, said
        assert (work / "out_b" / "train.bin").is_file() and not (work / "runs").exists()
    finally:
        for _, proc in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_run_dir_another_run_makes_at_the_same_moment_is_taken_not_refused(tmp_path, monkeypatch):
    """Two runs given one new hydra.run.dir: both see it missing, the other makes it first,
    and this one's mkdir fails with FileExistsError: the folder is there, as asked (and the
    other run's: this one does not remove it)."""
    from corpusprep import app

    real_mkdir = os.mkdir

    def the_other_run_first(path, *args):
        real_mkdir(path, *args)
        raise FileExistsError(17, "File exists", path)

    monkeypatch.setattr(app.os, "mkdir", the_other_run_first)
    made: list = []
    app._make_run_dir(str(tmp_path / "runs" / "x"), made)
    assert (tmp_path / "runs" / "x").is_dir() and made == []

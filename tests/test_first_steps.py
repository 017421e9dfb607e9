"""The first ten minutes (issue 12): what a newcomer runs works, keeps what it should, and
says what it does.

- every preset takes another source (file, files, url) and keeps its other settings;
- a preset's keys for another group choice are dropped (dataset=shakespeare tokenizer=char);
- GPT-2's ranks ship with corpusprep: the same ranks tiktoken loads, and the nanoGPT
  presets run with no network and no tiktoken cache;
- a re-run that replaces a folder made with other settings says so first;
- a side with fewer than a few blocks of tokens gets a warning;
- the summary reads well: plurals, the source line within 100 columns;
- `-m` may come after the overrides.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from helpers import REPO, LocalHTTPServer, run_cli

PRESETS = sorted(p.stem for p in (REPO / "conf" / "dataset").glob("*.yaml"))
DOCUMENT_PRESETS = {"openwebtext", "python_stdlib", "tinystories"}  # split_by=document


def _serving(folder: Path):
    from http.server import BaseHTTPRequestHandler

    def handler_for(server):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server.hit(self.path)
                file = folder / self.path.lstrip("/")
                if not file.is_file():
                    self.send_error(404)
                    return
                body = file.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler

    return LocalHTTPServer(handler_for)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """tiny shakespeare as one text, and its paragraphs as JSONL documents."""
    from conftest import SHARED_DATA

    text_file = SHARED_DATA / "tinyshakespeare" / "input.txt"
    if not text_file.is_file():
        pytest.skip(f"offline data folder {SHARED_DATA} is absent")
    folder = tmp_path_factory.mktemp("inputs")
    text = text_file.read_text(encoding="utf-8")
    (folder / "input.txt").write_text(text, encoding="utf-8")
    docs = [p for p in text[:200_000].split("\n\n") if p.strip()]
    (folder / "docs.jsonl").write_text(
        "".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8"
    )
    return folder


@pytest.fixture(scope="module")
def http(inputs):
    server = _serving(inputs)
    try:
        yield server
    finally:
        server.stop()


def _preset(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "dataset" / f"{name}.yaml"))


@pytest.mark.parametrize("switch", ["file", "files", "url"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_takes_another_source(preset, switch, inputs, http, tmp_path, loopback_env,
                                           tiktoken_cache):  # fmt: skip
    name = "docs.jsonl" if preset in DOCUMENT_PRESETS else "input.txt"
    where = {
        "file": [f"source.path={inputs / name}"],
        "files": [f"source.glob={inputs / name}"],
        "url": [f"source.url={http.root}/{name}"],
    }[switch]
    cache = {"CORPUSPREP_CACHE_DIR": str(tmp_path / "cache")}
    r = run_cli(f"dataset={preset}", f"source={switch}", *where, "out_dir=out", "quiet=true",
                cwd=tmp_path, env=cache)  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["source"]["kind"] == switch
    wanted = _preset(preset)
    tokenizer = next(d["override /tokenizer"] for d in wanted["defaults"]
                     if "override /tokenizer" in d)  # fmt: skip
    assert manifest["tokenizer"]["kind"] == tokenizer  # the preset's other settings are kept
    assert manifest["name"] == wanted["name"]
    for key in ("split_by", "eot", "order", "seed", "val_size"):
        if key in wanted:
            assert manifest["config"][key] == wanted[key], key
    for key, value in wanted.get("tokenizer", {}).items():
        assert manifest["config"]["tokenizer"][key] == value
    # keys only the preset's own source takes are gone, the common read options stay
    source = manifest["config"]["source"]
    assert "dataset" not in source and "glob" not in source or switch == "files"
    for key, value in wanted.get("source", {}).items():
        if key in ("doc_end", "doc_separator", "skip_invalid"):
            assert source[key] == value, key


def test_a_preset_keeps_its_settings_when_the_tokenizer_changes(tmp_path, seeded_cache):
    """dataset=shakespeare sets tokenizer.encoding for tiktoken; with tokenizer=char that key
    would be refused by the char tokenizer: it is the preset's, so it is dropped."""
    r = run_cli("dataset=shakespeare", "tokenizer=char", "out_dir=out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["tokenizer"]["kind"] == "char" and manifest["name"] == "shakespeare"
    assert "encoding" not in manifest["config"]["tokenizer"]
    assert manifest["tokens"] == {"train": 1_003_854, "val": 111_540}


def _own_config(tmp_path: Path, files: dict[str, str]) -> list[str]:
    """A --config-dir holding `files` (path under it -> text), and a small input."""
    for name, text in files.items():
        (tmp_path / "conf" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "conf" / name).write_text(text)
    (tmp_path / "a.txt").write_text("some text to read\n" * 200)
    return ["--config-dir", str(tmp_path / "conf"), "source=file", "source.path=a.txt",
            "out_dir=out", "quiet=true"]  # fmt: skip


def test_a_misspelt_key_in_a_config_file_is_refused(tmp_path, tiktoken_cache):
    """tokenizer.encodng in a file of one's own was dropped as if a preset's leftover, and
    the run went on with GPT-2 (exit 0, nothing recorded): a key no option of the group
    takes is a misspelling, said in one line with the key it meant."""
    args = _own_config(
        tmp_path,
        {
            "tokenizer/typo.yaml": (
                "_target_: corpusprep.tokenizers.tiktoken.TiktokenTokenizer\nencodng: cl100k_base\n"
            )
        },
    )
    from helpers import assert_one_line_error

    r = run_cli(*args, "tokenizer=typo", cwd=tmp_path)
    assert_one_line_error(r, "tokenizer.encodng", "config file", "did you mean tokenizer.encoding")
    assert "tokenizer=typo has no such key" in r.stderr  # the option chosen, not tiktoken
    assert not (tmp_path / "out" / "train.bin").exists()


def test_an_option_of_ones_own_is_named_by_its_own_name(tmp_path, tiktoken_cache):
    """An option of a --config-dir with a shipped class was named after the shipped option
    in messages (`tokenizer=tiktoken has no such key` for tokenizer=mine)."""
    from helpers import assert_one_line_error

    args = _own_config(tmp_path, {
        "tokenizer/mine.yaml": "_target_: corpusprep.tokenizers.tiktoken.TiktokenTokenizer\n"
                               "encoding: gpt2\n",
    })  # fmt: skip
    r = run_cli(*args, "tokenizer=mine", "tokenizer.encodng=gpt2", cwd=tmp_path)
    assert_one_line_error(r, "tokenizer.encodng", "tokenizer=mine has no such key",
                          "did you mean tokenizer.encoding")  # fmt: skip
    r = run_cli(*args, "tokenizer=mine", "tokenizer.ranks=x", cwd=tmp_path)
    assert_one_line_error(r, "tokenizer=mine")
    assert "tokenizer=tiktoken" not in r.stderr


def test_a_misspelt_top_level_key_in_a_preset_is_refused(tmp_path):
    """splitt: 0.5 in a preset of one's own ran with split 0.9: a top-level key close to one
    corpusprep has is a misspelling. A name of one's own for an interpolation (a helper
    value) is not close to any, and stays."""
    from helpers import assert_one_line_error

    args = _own_config(tmp_path, {
        "dataset/typo.yaml": "# @package _global_\nsplitt: 0.5\n",
        "dataset/helper.yaml": "# @package _global_\nmy_fraction: 0.5\nsplit: ${my_fraction}\n",
    })  # fmt: skip
    r = run_cli(*args, "dataset=typo", cwd=tmp_path)
    assert_one_line_error(r, "splitt", "config file", "did you mean split")
    r = run_cli(*args, "dataset=helper", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["split"]["fraction"] == 0.5 and manifest["tokens"]["train"] == 1800


def test_the_bundled_gpt2_ranks_are_tiktokens(tiktoken_cache):
    import tiktoken

    from corpusprep.tokenizers.tiktoken import BUNDLED_ENCODINGS, bundled_ranks

    real = tiktoken.get_encoding("gpt2")  # from vocab.bpe + encoder.json in the cache
    for name in BUNDLED_ENCODINGS:
        assert bundled_ranks(name) == real._mergeable_ranks, name
    assert bundled_ranks("cl100k_base") is None


def test_the_nanogpt_presets_need_no_network_and_no_cache(tmp_path, shakespeare):
    """No TIKTOKEN_CACHE_DIR, an empty home and cache, and every proxy a dead port on
    loopback: nothing can be fetched, and the three presets still give nanoGPT's and
    llm.c's counts."""
    dead = "http://127.0.0.1:9"
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               CORPUSPREP_CACHE_DIR=str(tmp_path / "cache"), HTTP_PROXY=dead,
               HTTPS_PROXY=dead, NO_PROXY="", HF_HUB_OFFLINE="1")  # fmt: skip
    expected = {
        "shakespeare_char": {"train": 1_003_854, "val": 111_540},
        "shakespeare": {"train": 301_966, "val": 36_059},
    }
    for preset, tokens in expected.items():
        r = run_cli(f"dataset={preset}", f"out_dir={preset}", "quiet=true", cwd=tmp_path,
                    env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr
        manifest = json.loads((tmp_path / preset / "manifest.json").read_text())
        assert manifest["tokens"] == tokens
        assert manifest["source"]["url"].startswith("https://raw.githubusercontent.com/")
    r = run_cli("dataset=shakespeare_llmc", "out_dir=llmc", "quiet=true", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.tiktoken"))


def _replacing_line(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "replacing" in line]


def test_a_rerun_with_other_settings_says_what_it_replaces(tmp_path, seeded_cache):
    first = run_cli("dataset=shakespeare_char", "quiet=true", cwd=tmp_path)
    assert first.returncode == 0 and not _replacing_line(first), first.stderr
    same = run_cli("dataset=shakespeare_char", "quiet=true", cwd=tmp_path)
    assert "up to date" in same.stdout and not _replacing_line(same)
    forced = run_cli("dataset=shakespeare_char", "quiet=true", "force=true", cwd=tmp_path)
    assert not _replacing_line(forced), forced.stderr  # the same settings: nothing to say
    other = run_cli("dataset=shakespeare_char", "tokenizer=byte", "quiet=true", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert _replacing_line(other) == [
        "corpusprep: replacing data/shakespeare_char, made with tokenizer=char; "
        "out_dir=data/shakespeare_char-byte keeps both"
    ]
    split = run_cli("dataset=shakespeare_char", "tokenizer=byte", "split=0.8", "quiet=true",
                    cwd=tmp_path)  # fmt: skip
    assert _replacing_line(split) == [
        "corpusprep: replacing data/shakespeare_char, made with split=0.9; "
        "out_dir=data/shakespeare_char-split0.8 keeps both"
    ]
    keep = run_cli("dataset=shakespeare_char", "out_dir=data/shakespeare_char-char",
                   "quiet=true", cwd=tmp_path)  # fmt: skip
    assert keep.returncode == 0 and not _replacing_line(keep)  # the advice keeps both
    made = json.loads((tmp_path / "data/shakespeare_char/manifest.json").read_text())
    assert made["config"]["split"] == 0.8


def test_the_replacing_line_names_each_change_once(tmp_path):
    """shard_tokens (format.shard_tokens follows it) was named twice, in the line and in
    the suggested folder; a changed path gave out_dir=data/good-pathmy.txt."""
    (tmp_path / "good.txt").write_text("some good text\n" * 2000)
    (tmp_path / "my.txt").write_text("my own text\n" * 2000)
    base = ["source=file", "format=npy", "quiet=true", "out_dir=data/good"]
    first = run_cli(*base, "source.path=good.txt", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    shards = run_cli(*base, "source.path=good.txt", "shard_tokens=1000", cwd=tmp_path)
    assert _replacing_line(shards) == [
        "corpusprep: replacing data/good, made with shard_tokens=100000000; "
        "out_dir=data/good-shard_tokens1000 keeps both"
    ]
    path = run_cli(*base, "source.path=my.txt", "shard_tokens=1000", cwd=tmp_path)
    assert _replacing_line(path) == [
        "corpusprep: replacing data/good, made with source.path=good.txt; "
        "out_dir=data/good-my keeps both"
    ]


# found by an attack: only the ranks file changed, and the line said "made from other
# input", showing the unchanged input's own sha256
def test_the_replacing_line_names_what_changed_besides_the_settings(tmp_path, tiktoken_cache):
    (tmp_path / "good.txt").write_text("the cat and the dog\n" * 2000)
    from corpusprep.tokenizers.tiktoken import bundled_ranks

    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in bundled_ranks("gpt2").items()]
    (tmp_path / "r.tiktoken").write_text("\n".join(lines) + "\n")
    base = ["source=file", "source.path=good.txt", "tokenizer=tiktoken", "quiet=true",
            "tokenizer.ranks_file=r.tiktoken", "out_dir=data/good"]  # fmt: skip
    assert run_cli(*base, cwd=tmp_path).returncode == 0
    # the ranks of " the" and " and" swapped: other ids from the same text and settings
    a, b = base64.b64encode(b" the").decode(), base64.b64encode(b" and").decode()
    swapped = [f"{b if t == a else a if t == b else t} {r}" for t, r in (x.split() for x in lines)]
    (tmp_path / "r.tiktoken").write_text("\n".join(swapped) + "\n")
    r = run_cli(*base, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (line,) = _replacing_line(r)
    assert "made with tokenizer.ranks_sha256=" in line and "other input" not in line, line
    # the input changed too: said first
    (tmp_path / "good.txt").write_text("another text\n" * 2000)
    (tmp_path / "r.tiktoken").write_text("\n".join(lines) + "\n")
    r = run_cli(*base, cwd=tmp_path)
    (line,) = _replacing_line(r)
    assert "made from other input" in line, line


def test_following_the_advice_never_replaces_what_it_kept(tmp_path):
    """Three texts of one name in three folders: the second advice named the folder the
    first advice had kept (out_dir=x-corpus both times), so following it lost b's files."""
    for name in "abc":
        (tmp_path / name).mkdir()
        (tmp_path / name / "corpus.txt").write_text(f"text {name}\n" * 2000)
    base = ["source=file", "quiet=true"]
    assert run_cli(*base, "source.path=a/corpus.txt", "out_dir=x", cwd=tmp_path).returncode == 0
    b = run_cli(*base, "source.path=b/corpus.txt", "out_dir=x", cwd=tmp_path)
    assert _replacing_line(b)[0].endswith("out_dir=x-corpus keeps both")
    assert (
        run_cli(*base, "source.path=b/corpus.txt", "out_dir=x-corpus", cwd=tmp_path).returncode == 0
    )
    c = run_cli(*base, "source.path=c/corpus.txt", "out_dir=x", cwd=tmp_path)
    assert _replacing_line(c)[0].endswith("out_dir=x-corpus-2 keeps both"), c.stderr
    # a glob by its folder, not its wildcard; a key inside a group said with its group
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "f.txt").write_text("library text\n" * 2000)
    glob = run_cli(*base, "source=files", "source.glob=lib/*.txt", "out_dir=x", cwd=tmp_path)
    assert _replacing_line(glob)[0].endswith("out_dir=x-files keeps both"), glob.stderr
    (tmp_path / "lib2").mkdir()
    (tmp_path / "lib2" / "f.txt").write_text("other library text\n" * 2000)
    glob2 = run_cli(*base, "source=files", "source.glob=lib2/**/*.txt", "out_dir=x", cwd=tmp_path)
    assert _replacing_line(glob2)[0].endswith("out_dir=x-lib2 keeps both"), glob2.stderr
    bpe = ["source=file", "source.path=a/corpus.txt", "tokenizer=bpe", "tokenizer.vocab_size=300",
           "quiet=true", "out_dir=y"]  # fmt: skip
    assert run_cli(*bpe, "seed=0", cwd=tmp_path).returncode == 0
    both = run_cli(*bpe, "seed=1", "tokenizer.seed=1", cwd=tmp_path)
    assert "made with seed=0, tokenizer.seed=" in _replacing_line(both)[0], both.stderr


def test_a_value_auto_would_choose_is_up_to_date(tmp_path, tiktoken_cache):
    """dtype=uint16, split_by=position or eot=none, given where auto chooses just that,
    make the same files: the folder is up to date (it was redone, 'made with dtype=auto')."""
    (tmp_path / "one.txt").write_text("one plain text\n" * 3000)
    (tmp_path / "docs").mkdir()
    for i in range(4):
        (tmp_path / "docs" / f"{i}.txt").write_text(f"document {i}\n" * 500)
    cases = [
        (["source=file", "source.path=one.txt"], ["dtype=uint16", "split_by=position", "eot=none"]),
        (["source=files", "source.glob=docs/*.txt", "tokenizer=tiktoken"],
         ["dtype=uint16", "split_by=document", "eot=append"]),
    ]  # fmt: skip
    for i, (source, explicit) in enumerate(cases):
        base = [*source, f"out_dir=out{i}", "quiet=true"]
        assert run_cli(*base, cwd=tmp_path).returncode == 0
        again = run_cli(*base, *explicit, cwd=tmp_path)
        assert again.returncode == 0 and "is up to date" in again.stdout, again.stderr
        other = run_cli(*base, "dtype=uint32", cwd=tmp_path)  # a real change still counts
        assert _replacing_line(other) == [
            f"corpusprep: replacing out{i}, made with dtype=auto; out_dir=out{i}-dtypeuint32 "
            "keeps both"
        ]


def test_a_tiny_side_is_warned(tmp_path, seeded_cache):
    r = run_cli("dataset=shakespeare_char", "split=0.9999999", "quiet=true", cwd=tmp_path)
    assert r.returncode == 0
    assert r.stderr.strip() == (
        "corpusprep: warning: shakespeare_char: val under 4 blocks of 1024 tokens (nanoGPT's "
        "default block_size; train 1,115,393, val 1 tokens); change split (now 0.9999999)"
    )
    # val_size alone sizes val with head/tail (and document): split would change nothing
    r = run_cli("dataset=shakespeare_char", "split_by=head", "val_size=100", "out_dir=head",
                "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and r.stderr.strip().endswith(
        "val 100 tokens); change val_size (now 100)"), r.stderr  # fmt: skip
    (tmp_path / "small.txt").write_text("a tiny corpus\n" * 20)
    r = run_cli("source=file", "source.path=small.txt", "quiet=true", cwd=tmp_path)
    assert r.returncode == 0 and "a bigger corpus is needed" in r.stderr
    r = run_cli("dataset=shakespeare_char", "out_dir=ok", "quiet=true", cwd=tmp_path)
    assert r.stderr == ""  # 111,540 val tokens: nothing to say


def test_a_shard_bytes_that_makes_thousands_of_shards_is_warned(tmp_path):
    # each shard costs time of its own: shard_bytes=10 (10 MB meant) took 400x longer
    (tmp_path / "lines.txt").write_text("a line\n" * 5000)  # a shard per line at most
    r = run_cli("source=file", "source.path=lines.txt", "shard_bytes=1", "quiet=true",
                cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "warning: shard_bytes=1 cuts the input into 5,000 shards" in r.stderr
    r = run_cli("source=file", "source.path=lines.txt", "shard_bytes=64", "quiet=true",
                "out_dir=fewer", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and "shard_bytes" not in r.stderr, r.stderr


def test_a_glob_over_the_folder_holding_out_dir_never_reads_its_outputs(tmp_path):
    """out_dir inside the corpus folder and `source.glob='corpus/**/*'`: the second run
    read the first's manifest.json as JSON Lines and failed on it ("not valid JSON"). The
    files out_dir's last run wrote are left out, with a note: a re-run is up to date."""
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("first document\n" * 300)
    (corpus / "sub" / "b.txt").write_text("second document\n" * 300)
    args = ("source=files", "source.glob=corpus/**/*", "out_dir=corpus/out")
    first = run_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    made = (corpus / "out" / "train.bin").read_bytes()
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout + again.stderr
    assert "left out" in again.stderr and "corpus/out" in again.stderr
    assert (corpus / "out" / "train.bin").read_bytes() == made
    # a file of the user's in out_dir is still read; one of ours named alone is refused
    (corpus / "out" / "c.txt").write_text("third document\n" * 300)
    third = run_cli(*args, "quiet=true", cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    manifest = json.loads((corpus / "out" / "manifest.json").read_text())
    assert manifest["documents"]["total"] == 3
    assert [Path(f["path"]).name for f in manifest["source"]["files"]] == ["a.txt", "c.txt",
                                                                           "b.txt"]  # fmt: skip
    alone = run_cli("source=file", "source.path=corpus/out/train.bin", "out_dir=corpus/out",
                    cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    assert "train.bin" in alone.stderr and "out_dir" in alone.stderr


@pytest.mark.parametrize("absolute", [False, True])
def test_another_runs_output_folder_in_a_glob_is_named_with_its_exclusion(tmp_path, absolute):
    """`source.glob='corpus/**/*'` over a folder holding an earlier run's out_dir (not this
    run's, whose files are left out): its doc_index failed as invalid UTF-8, whose advice
    (skip_invalid) led to its manifest.json failing as JSON. One line names the folder and
    the source.exclude that leaves it out, which works; the files of a folder that only
    has a manifest.json of someone else's are read."""
    from helpers import assert_one_line_error

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("first document\n" * 300)
    (corpus / "b.txt").write_text("second document\n" * 300)
    first = run_cli("source=files", "source.glob=corpus/*.txt", "split_by=document",
                    "val_size=1", "out_dir=corpus/out", "quiet=true", cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    glob = f"{corpus}/**/*" if absolute else "corpus/**/*"
    args = ("source=files", f"source.glob={glob}", "out_dir=out2", "quiet=true")
    r = run_cli(*args, cwd=tmp_path)
    folder = str(corpus / "out") if absolute else "corpus/out"
    exclude = f'source.exclude=["{corpus / "out"}/*"]'
    assert_one_line_error(r, f"{folder}: ", "corpusprep output folder", exclude)
    fix = next(part for part in r.stderr.split() if part.startswith("'source.exclude="))
    again = run_cli(*args, fix.strip("'"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    manifest = json.loads((tmp_path / "out2" / "manifest.json").read_text())
    assert [Path(f["path"]).name for f in manifest["source"]["files"]] == ["a.txt", "b.txt"]
    # a manifest.json that is not corpusprep's is a file like any other
    (corpus / "data").mkdir()
    (corpus / "data" / "manifest.json").write_text('{"text": "a JSON document"}\n')
    other = run_cli(*args, fix.strip("'"), "force=true", cwd=tmp_path)
    assert other.returncode == 0, other.stderr


@pytest.mark.parametrize("glob", ["./**/*", "data/**/*", "{root}/data/**/*"])
def test_the_exclusion_advised_for_an_output_folder_works_however_it_is_globbed(tmp_path, glob):
    """The advice must leave the folder out however the glob gives its paths ('./**/*'
    lists ./data/run[1]/...; found by an attack: data/x/* did not match that), with glob
    characters in its name."""
    from helpers import assert_one_line_error

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("first document\n" * 300)
    made = run_cli("source=file", "source.path=data/a.txt", 'out_dir="data/run[1]"', "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    args = ("source=files", f"source.glob={glob.format(root=tmp_path)}", "out_dir=../elsewhere",
            "quiet=true")  # fmt: skip
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r, "run[1]: a corpusprep output folder")
    fix = next(part for part in r.stderr.split() if part.startswith("'source.exclude="))
    again = run_cli(*args, fix.strip("'"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    manifest = json.loads((tmp_path.parent / "elsewhere" / "manifest.json").read_text())
    assert [Path(f["path"]).name for f in manifest["source"]["files"]] == ["a.txt"]


def test_the_exclusion_advised_for_an_output_folder_keeps_those_given(tmp_path):
    """Pasting the advice replaces source.exclude: the exclusions given must be in it, else
    what they left out came back (found by an attack on the same advice for odd files)."""
    from helpers import assert_one_line_error

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("first document\n" * 300)
    (tmp_path / "data" / "skip.txt").write_bytes(b"\xff not text\n")
    made = run_cli("source=file", "source.path=data/a.txt", "out_dir=data/run", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    args = ("source=files", "source.glob=data/**/*", "out_dir=../elsewhere", "quiet=true")
    r = run_cli(*args, "source.exclude=[data/skip.txt]", cwd=tmp_path)
    assert_one_line_error(r, "a corpusprep output folder", '"data/skip.txt",')
    fix = r.stderr.split(" out with ", 1)[1].split(" (or move it)")[0]
    again = run_cli(*args, fix.strip("'"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_the_exclusion_advised_leaves_out_every_output_folder_at_once(tmp_path):
    """Found by a newcomer's attack: a glob over a folder holding several earlier runs' out_dirs
    (data/a, data/b, ...) named the first, and its advice left out that one only: each paste
    met the next folder, one run at a time."""
    from helpers import assert_one_line_error

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("first document\n" * 300)
    for out in ("run1", "run2", "run3"):
        made = run_cli("source=file", "source.path=data/a.txt", f"out_dir=data/{out}",
                       "quiet=true", cwd=tmp_path)  # fmt: skip
        assert made.returncode == 0, made.stderr
    args = ("source=files", "source.glob=data/**/*", "out_dir=../elsewhere", "quiet=true")
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r, "data/run1 and 2 other corpusprep output folders")
    fix = next(part for part in r.stderr.split() if part.startswith("'source.exclude="))
    again = run_cli(*args, fix.strip("'"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_output_folders_of_every_format_are_named_by_a_glob_of_their_files(tmp_path):
    """Found by a newcomer's attack: only nanoGPT's train.bin / val.bin (or a manifest.json
    the glob matched) told an output folder; a 'data/**/*.bin' glob over llm.c's, build-
    nanogpt's or Megatron's files (or doc_index/) read their ids as text: "binary data"."""
    from helpers import assert_one_line_error

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("first document\n" * 300)
    for fmt in ("llmc", "npy", "megatron"):
        made = run_cli("source=file", "source.path=data/a.txt", f"out_dir=data/{fmt}",
                       f"format={fmt}", "quiet=true", cwd=tmp_path)  # fmt: skip
        assert made.returncode == 0, made.stderr
    # the ids (.bin, .npy, doc_index/*.bin), not the manifests, token_bytes.npy or meta.pkl
    args = ("source=files", "source.glob=[data/**/*.bin,data/**/*_0*.npy,data/a.txt]",
            "out_dir=../elsewhere", "quiet=true")  # fmt: skip
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r, "data/llmc and 2 other corpusprep output folders")
    fix = next(part for part in r.stderr.split() if part.startswith("'source.exclude="))
    # the advised exclusion leaves out every file of theirs (doc_index/ too), whatever the glob
    again = run_cli("source=files", "source.glob=data/**/*", "out_dir=../elsewhere",
                    "quiet=true", fix.strip("'"), cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr


def test_the_output_folder_line_stays_one_line_for_a_name_with_a_newline(tmp_path):
    from helpers import assert_one_line_error

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("first document\n" * 300)
    made = run_cli("source=file", "source.path=data/a.txt", "out_dir=data/o", "quiet=true",
                   cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    (tmp_path / "data" / "o").rename(tmp_path / "data" / "o\nnl")
    args = ("source=files", "source.glob=data/**/*", "out_dir=../elsewhere", "quiet=true",
            "source.exclude=[\"/zz\nyy\"]")  # fmt: skip
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r, "o?nl: a corpusprep output folder")


def test_the_summary_reads_well(tmp_path, seeded_cache):
    r = run_cli("dataset=shakespeare_char", "split=0.9999999", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "  val        1 token" in lines
    assert all(len(line) <= 100 for line in lines), lines
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("one text\n" * 300)
    r = run_cli("source=files", "source.glob=texts/*.txt", "out_dir=one", cwd=tmp_path)
    source = next(line for line in r.stdout.splitlines() if line.startswith("  source"))
    assert "1 files" not in source and "((" not in source and "))" not in source
    (folder / "b.txt").write_text("two text\n" * 300)
    r = run_cli("source=files", "source.glob=texts/*.txt", "out_dir=two", cwd=tmp_path)
    source = next(line for line in r.stdout.splitlines() if line.startswith("  source"))
    assert source.startswith("  source     texts/*.txt (2 files, ") and "((" not in source


def test_the_multirun_flag_may_come_last(tmp_path, seeded_cache):
    r = run_cli("dataset=shakespeare_char", "split=0.8,0.9", "quiet=true", "-m", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("multirun/*/*/*/manifest.json"))) == 2


def test_the_top_level_keys_are_config_yamls():
    """config.TOP_KEYS (what a preset's misspelt top-level key is told apart from) is the
    list of keys conf/config.yaml sets."""
    from omegaconf import OmegaConf

    from corpusprep.config import TOP_KEYS

    keys = set(OmegaConf.load(REPO / "conf" / "config.yaml")) - {"defaults", "hydra"}
    assert keys == set(TOP_KEYS)


def test_replacing_files_no_corpusprep_run_wrote_is_said(tmp_path):
    """out_dir holding nanoGPT's own train.bin and val.bin (its prepare.py's, no manifest):
    they were replaced without a word. The run says which files it replaces; a user's file
    of another name stays, and a second run (its own files now) says nothing."""
    (tmp_path / "a.txt").write_text("some text to read\n" * 300)
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.bin").write_bytes(b"\0\1" * 50)
    (out / "val.bin").write_bytes(b"\0\1" * 5)
    (out / "prepare.py").write_text("# nanoGPT's\n")
    args = ("source=file", "source.path=a.txt", "out_dir=out", "quiet=true")
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "replacing" in line]
    assert len(said) == 1 and "meta.pkl" not in said[0], r.stderr
    assert "train.bin, val.bin" in said[0] and "no corpusprep run wrote" in said[0], said
    assert (out / "prepare.py").read_text() == "# nanoGPT's\n"
    again = run_cli(*args, "force=true", cwd=tmp_path)
    assert again.returncode == 0 and "replacing" not in again.stderr, again.stderr


def test_a_rerun_says_why_it_redoes_a_folder_whose_outputs_changed(tmp_path):
    """train.bin changed after its run (same size): the re-run redid the folder, rightly,
    without saying why. It says which file no longer matches its manifest."""
    (tmp_path / "a.txt").write_text("some text to read\n" * 300)
    args = ("source=file", "source.path=a.txt", "out_dir=out", "quiet=true")
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    train = tmp_path / "out" / "train.bin"
    made = train.read_bytes()
    train.write_bytes(bytes(len(made)))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "train.bin" in line]
    assert len(said) == 1 and "did not match its manifest" in said[0], r.stderr
    assert train.read_bytes() == made
    again = run_cli(*args, cwd=tmp_path)
    assert "manifest" not in again.stderr and "up to date" in again.stdout + again.stderr


def test_a_presets_key_for_an_option_of_ones_own_is_dropped(tmp_path):
    """A --config-dir option (a class of one's own) and a preset setting its key, then
    tokenizer=char: the key is the preset's for that option, dropped as for shipped ones
    (the options of a --config-dir cannot be listed: only a near miss is a misspelling)."""
    (tmp_path / "mytok.py").write_text(
        "from corpusprep.tokenizers.char import CharTokenizer\n"
        "class T(CharTokenizer):\n"
        "    def __init__(self, lower: bool = True):\n"
        "        super().__init__()\n"
    )
    args = _own_config(tmp_path, {
        "tokenizer/mine.yaml": "_target_: mytok.T\nlower: true\nname: mine\n",
        "dataset/d.yaml": "# @package _global_\ndefaults:\n  - override /tokenizer: mine\n"
                          "tokenizer:\n  lower: false\n",
    })  # fmt: skip
    env = {"PYTHONPATH": str(tmp_path), "CORPUSPREP_PLUGIN_PACKAGES": "mytok"}
    r = run_cli(*args, "dataset=d", "tokenizer=char", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("helper", [
    "root_dir: out_root\nout_dir: ${root_dir}/x\n",
    "defaults:\n  - override /tokenizer: bpe\nvocab_size: 300\ntokenizer:\n"
    "  vocab_size: ${vocab_size}\n  train_chars: 3000\n",
])  # fmt: skip
def test_a_top_level_helper_an_interpolation_reads_stays(tmp_path, helper):
    """root_dir (near out_dir) or vocab_size (near val_size) read by a ${...}: a helper
    value, not a misspelling."""
    args = _own_config(tmp_path, {"dataset/h.yaml": "# @package _global_\n" + helper})
    r = run_cli(*[a for a in args if a != "out_dir=out"], "dataset=h", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_meta_pkl_this_run_does_not_write_is_not_said_replaced(tmp_path, tiktoken_cache):
    """nanoGPT's char files there, then a GPT-2 run (no meta.pkl): the note named meta.pkl
    as replaced while it stayed, and nanoGPT's train.py would read vocab 65 from it (found
    by an attack). The note names the two files; a warning says to move meta.pkl out."""
    import pickle

    (tmp_path / "a.txt").write_text("some text to read\n" * 300)
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.bin").write_bytes(b"\0\1" * 50)
    (out / "val.bin").write_bytes(b"\0\1" * 5)
    (out / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))
    r = run_cli("source=file", "source.path=a.txt", "tokenizer=tiktoken", "out_dir=out",
                "quiet=true", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (said,) = [line for line in r.stderr.splitlines() if "replacing" in line]
    assert "train.bin, val.bin in" in said and "meta.pkl" not in said, said
    (warned,) = [line for line in r.stderr.splitlines() if "meta.pkl" in line]
    assert "warning" in warned and "move it out of out_dir" in warned

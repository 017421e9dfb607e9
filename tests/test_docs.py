"""The docs are true (issue 12): every shell example of README.md and docs/*.md runs through
the real command line, offline, and `python -m corpusprep --help` is corpusprep's own page.

An example is a line of a ```sh / ```bash / ```console block or of a 4-space indented block
that starts with `python -m corpusprep` or `corpusprep ` (`$ ` first in a console block).
In a console block, the lines after a command are what it prints: each must match a line
it printed (`...` stands for anything), and a `corpusprep: error: ...` line must be its only
line on stderr, with exit code 1. Every other example must exit 0. Only the examples marked
`# needs: network|hub|cluster` in the page are skipped. The examples of a page run in order
in one folder of their own, as a reader following the page would run them (so `inspect
data/x` finds the folder an earlier example made); the input files they name (my.txt,
web/*.jsonl.zst, ...) are made first from tiny shakespeare, and a ```yaml block whose first
line is `# PATH.yaml` is written to PATH.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest
from helpers import REPO, run_forked
from omegaconf import OmegaConf

# one worker (--dist loadgroup) runs the pages once, in its background; first: minutes
pytestmark = [pytest.mark.xdist_group("docs"), pytest.mark.slow]

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_FENCES = ("sh", "bash", "shell", "console")
COMMAND = re.compile(r"^(?:\$ )?((?:python -m corpusprep(?:\.inspect)?|corpusprep)(?: |$).*)$")
NEEDS = {  # what a marked example needs that a test machine has not: why it is skipped
    "network": "downloads from a real remote host",
    "hub": "reads the Hugging Face Hub",
    "cluster": "needs a Ray cluster or a Slurm cluster",
}
# what a marked example downloads once, and the test seeds as that download leaves it; the
# others run with nothing seeded, as a newcomer's first commands do
SEEDED = {"tiktoken-files": "TIKTOKEN_CACHE_DIR"}
DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens: any request that is not local fails fast
PLUGIN_TOKENIZER = "example_codepoint"  # tests/example_plugin's, installed for docs/plugins.md


@dataclass
class Example:
    page: str
    line: int
    command: str  # as written, without `$ `
    needs: Optional[str] = None
    expected: list[str] = field(default_factory=list)  # console blocks: what it prints

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _comment_start(line: str) -> int:
    """Where a shell comment starts (a `#` after a blank, outside quotes), else len(line)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return len(line)


def _runs_here(example: Example) -> bool:
    return not example.needs or example.needs in SEEDED


def _needs(command: str) -> Optional[str]:
    found = re.search(r"#\s*needs:\s*([\w-]+)", command[_comment_start(command) :])
    return found.group(1) if found else None


def extract(path: Path) -> tuple[list[Example], dict[str, str]]:
    """The examples of a page, and the config files its ```yaml blocks ask to be written."""
    examples: list[Example] = []
    files: dict[str, str] = {}
    page = path.relative_to(REPO).as_posix()
    fence: Optional[str] = None
    block: list[str] = []
    current: Optional[Example] = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence, block, current = stripped[3:].strip().lower(), [], None
            else:
                head = block[0].strip() if block else ""
                if fence == "yaml" and re.fullmatch(r"# [\w./-]+\.yaml", head):
                    files[head[2:]] = "\n".join(block) + "\n"
                fence, current = None, None
            continue
        if fence is not None:
            block.append(line)
            text = line if fence == "console" else stripped
        elif line.startswith("    "):
            text = line[4:]
        else:
            current = None
            continue
        if fence is not None and fence not in SHELL_FENCES:
            continue
        match = COMMAND.match(text.strip() if fence != "console" else text)
        if match:
            current = Example(page, number, match.group(1), _needs(match.group(1)))
            examples.append(current)
        elif fence == "console" and current is not None and stripped:
            current.expected.append(stripped)
    return examples, files


EXAMPLES = [e for page in PAGES for e in extract(page)[0]]


# ---- the input files the examples name, made once from tiny shakespeare ----


def _paragraphs(text: str) -> list[str]:
    return [p + "\n" for p in text.split("\n\n") if p.strip()]


def _tokenizer_json(text: str, path: Path) -> None:
    """A small byte-level BPE tokenizer.json with <|endoftext|>, trained on the spot."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    tok.train_from_iterator(text.splitlines(keepends=True)[:4000], trainer)
    tok.save(str(path))


def make_inputs(folder: Path, shakespeare: Path, tiktoken_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    text = shakespeare.read_text(encoding="utf-8")
    half = text.index("\n", len(text) // 2) + 1
    (folder / "my.txt").write_text(text, encoding="utf-8")
    (folder / "a.txt").write_text(text[:half], encoding="utf-8")
    (folder / "b.txt").write_text(text[half:], encoding="utf-8")
    # invalid UTF-8 at byte 1043, as docs/errors.md shows it
    (folder / "notes.txt").write_bytes(b"To be, or not to be.\n" * 49 + b"abcdefghij\ncaf\xe9\n")
    paragraphs = _paragraphs(text)
    (folder / "books").mkdir()
    for i in range(8):
        (folder / "books" / f"book_{i}.txt").write_text("".join(paragraphs[i::8]), "utf-8")
    lines = [json.dumps({"text": p}) + "\n" for p in paragraphs]
    (folder / "web").mkdir()
    (folder / "corpus").mkdir()
    for i in range(2):
        data = "".join(lines[i::2]).encode("utf-8")
        (folder / "web" / f"web_{i:02d}.jsonl.zst").write_bytes(zstandard.compress(data))
        (folder / "corpus" / f"corpus_{i:02d}.jsonl.gz").write_bytes(gzip.compress(data))
    (folder / "shards").mkdir()
    pq.write_table(pa.table({"content": paragraphs}), folder / "shards" / "part_00.parquet")
    _tokenizer_json(text, folder / "tokenizer.json")
    # a .tiktoken ranks file of one's own: cl100k_base's, from the offline tiktoken cache
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    shutil.copyfile(tiktoken_dir / hashlib.sha1(url.encode()).hexdigest(), folder / "my.tiktoken")


@pytest.fixture(scope="session")
def inputs(tmp_path_factory, shakespeare: Path, shared_data: Path) -> Path:
    folder = tmp_path_factory.mktemp("doc_inputs")
    make_inputs(folder, shakespeare, shared_data / "tiktoken")
    return folder


def install_example_plugin(target: Path) -> Path:
    """tests/example_plugin laid out as `pip install --target` lays it out (the package, and a
    dist-info naming its entry point), without building it: tests/test_plugins.py installs
    it for real."""
    plugin = REPO / "tests" / "example_plugin"
    project = (plugin / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r'\[project\.entry-points\."corpusprep\.conf"\]\n(.*?)(?:\n\[|\Z)', project,
                        re.S).group(1)  # fmt: skip
    shutil.copytree(plugin / "corpusprep_example_plugin", target / "corpusprep_example_plugin")
    info = target / "corpusprep_example_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: corpusprep-example-plugin\n"
                                   "Version: 0.1.0\n")  # fmt: skip
    entries = [line.replace('"', "") for line in section.splitlines() if "=" in line]
    (info / "entry_points.txt").write_text("[corpusprep.conf]\n" + "\n".join(entries) + "\n")
    return target


def offline_env(folder: Path, shared_data: Path, plugins: Optional[Path] = None) -> dict[str, str]:
    """This checkout first on the path, caches in the page's folder (tiktoken's empty, as a
    newcomer's: SEEDED examples get the offline copy), and no way out: HTTP(S) goes to a
    dead proxy (loopback excepted, as conftest's loopback_env has it), the Hub is offline,
    no Hub token."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    paths = [str(REPO), *([str(plugins)] if plugins else []), env.get("PYTHONPATH", "")]
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, paths)),
        "CORPUSPREP_CACHE_DIR": str(folder / ".cache" / "corpusprep"),
        "HF_HOME": str(folder / ".cache" / "huggingface"),
        "HF_HUB_OFFLINE": "1",
        "TIKTOKEN_CACHE_DIR": str(folder / ".cache" / "tiktoken"),
        **{
            name: DEAD_PROXY
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")
        },  # fmt: skip
        **{name: "127.0.0.1,127.0.0.2,localhost" for name in ("NO_PROXY", "no_proxy")},
    }


def shell_command(example: Example) -> str:
    """The example as bash runs it: this Python, and quiet=true on a run that prints nothing
    the page shows (bars and summaries are not what the example is about)."""
    code = example.command[: _comment_start(example.command)].rstrip()
    if code.startswith("python "):
        code = shlex.quote(sys.executable) + code[len("python") :]
    else:  # the console script; this checkout's, through PYTHONPATH
        script = shutil.which("corpusprep", path=str(Path(sys.executable).parent))
        code = (shlex.quote(script) if script else f"{shlex.quote(sys.executable)} -m corpusprep"
                ) + code[len("corpusprep") :]  # fmt: skip
    runs = " -m corpusprep.inspect" not in code and not re.search(r" --(help|cfg)\b", code)
    if runs and not example.expected and not re.search(r"\b(quiet|dry_run)=", code):
        code += " quiet=true"
    return code


def _pattern(shown: str) -> re.Pattern:
    parts = [r"\s+".join(map(re.escape, piece.split())) for piece in shown.split("...")]
    return re.compile(".*".join(parts))


def check_output(example: Example, r: subprocess.CompletedProcess) -> None:
    said = f"{example.id}: {example.command}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    error = re.compile(r"corpusprep(\.inspect)?: error: ")
    errors = [line for line in example.expected if error.match(line)]
    if errors:
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 1, said
        assert len(lines) == 1 and "Traceback" not in r.stderr, said
        assert _pattern(errors[0]).fullmatch(lines[0].strip()), said
        return
    assert r.returncode == 0, said
    printed = [line.strip() for line in (r.stderr + r.stdout).splitlines()]
    for shown in example.expected:
        assert any(_pattern(shown).fullmatch(line) for line in printed), (shown, said)


def run_page(page: str, folder: Path, env: dict[str, str],
             seeded: dict[str, str]) -> dict[int, object]:  # fmt: skip
    """Every runnable example of a page, in order, in its folder: line -> CompletedProcess.
    `seeded`: the environment that points a SEEDED example at what it downloads."""
    results: dict[int, object] = {}
    for example in (e for e in EXAMPLES if e.page == page and _runs_here(e)):
        code = shell_command(example)
        args = plain_cli_args(code)
        env_now = {**env, **seeded} if example.needs in SEEDED else env
        if args is not None:  # what bash would run: forked from a CLI server (helpers)
            results[example.line] = run_forked(args[1:], folder, env_now, module=args[0])
            continue
        results[example.line] = subprocess.run(
            ["bash", "-c", code], cwd=folder, env=env_now, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
    return results


def plain_cli_args(code: str) -> Optional[list[str]]:
    """[MODULE, ARGS...] when bash would run `code` as exactly `python -m MODULE ARGS`,
    MODULE corpusprep or corpusprep.inspect, with nothing for the shell to act on (an
    operator, a redirection, an expansion, a pattern, a comment), else None."""
    quote = None
    for c in code:
        if quote == "'":  # single quotes: everything as it is
            quote = None if c == "'" else quote
        elif c in "$`\\":  # expanded (or escaped) outside single quotes
            return None
        elif quote == '"':
            quote = None if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in "|&;<>()*?[]{}~#\n":
            return None
    argv = shlex.split(code)
    if argv[:2] != [sys.executable, "-m"] or argv[2:3] not in (
        ["corpusprep"],
        ["corpusprep.inspect"],
    ):
        return None
    return argv[2:]


def _cost(page: str) -> int:
    """About how long a page's examples take, in plain runs: the longest pages start first."""
    heavy = re.compile(r" -m (?!corpusprep)|python_stdlib|launcher=")
    return sum(3 if heavy.search(e.command) else 1 for e in EXAMPLES
               if e.page == page and _runs_here(e))  # fmt: skip


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory, inputs: Path, shared_data: Path):
    """The examples of the pages this session tests, two pages at a time in the background
    (a page's own examples one after the other): `page_runs(page)` waits for its results."""
    from concurrent.futures import ThreadPoolExecutor

    pages = {item.callspec.params["example"].page for item in request.session.items
             if "example" in getattr(getattr(item, "callspec", None), "params", {})}  # fmt: skip
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {}
    for page in sorted(pages, key=_cost, reverse=True):
        folder = tmp_path_factory.mktemp(re.sub(r"\W", "_", page))
        shutil.copytree(inputs, folder, dirs_exist_ok=True)
        for name, text in extract(REPO / page)[1].items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        plugins = None  # the page that installs the example plugin runs with it
        if PLUGIN_TOKENIZER in (REPO / page).read_text(encoding="utf-8"):
            plugins = install_example_plugin(tmp_path_factory.mktemp("plugin_site"))
        seeded = {"TIKTOKEN_CACHE_DIR": str(shared_data / "tiktoken")}
        futures[page] = pool.submit(run_page, page, folder,
                                    offline_env(folder, shared_data, plugins), seeded)  # fmt: skip
    yield lambda page: futures[page].result()
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, page_runs, loopback_env, tiktoken_cache):
    if not _runs_here(example):
        assert example.needs in NEEDS, f"{example.id}: unknown marker needs: {example.needs}"
        pytest.skip(f"{example.id} {NEEDS[example.needs]} (marked # needs: {example.needs})")
    if PLUGIN_TOKENIZER in example.command and not importlib.util.find_spec(
        "hydra_plugins.corpusprep_searchpath"
    ):
        pytest.skip("corpusprep is not installed (pip install .): Hydra cannot see plugins")
    check_output(example, page_runs(example.page)[example.line])


def test_every_page_has_examples_and_marks_only_what_cannot_run_here():
    pages = {e.page for e in EXAMPLES}
    assert {"README.md", "docs/keys.md", "docs/errors.md", "docs/scaling.md"} <= pages
    for e in EXAMPLES:
        if e.needs == "cluster":
            assert re.search(r"executor=(ray|slurm)|submitit_slurm", e.command), e.id
        elif e.needs == "tiktoken-files":  # an encoding whose ranks do not ship
            assert re.search(r"tokenizer.encoding=\S*(cl100k|o200k|p50k|r50k_base)", e.command), (
                e.id
            )
        elif e.needs in ("network", "hub"):
            assert re.search(r"source=(url|hf)|dataset=(enwik8|text8|tinystories|openwebtext)",
                             e.command), e.id  # fmt: skip


def test_help_is_corpusprep_own_page(tmp_path, shared_data, loopback_env, tiktoken_cache):
    env = offline_env(tmp_path, shared_data)
    r = subprocess.run([sys.executable, "-m", "corpusprep", "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    page = r.stdout
    assert "Powered by Hydra" not in page and "is powered by Hydra" not in page
    assert page.lstrip().startswith("corpusprep:"), page[:200]
    presets = sorted(p.stem for p in (REPO / "conf" / "dataset").glob("*.yaml"))
    assert f"dataset: {', '.join(presets)}" in page  # the groups, from Hydra's listing
    groups = ("source: file, files, hf, url",
              "tokenizer: bpe, byte, char, hf, reuse, sentencepiece, tiktoken",
              "executor: local, ray, slurm", "format: llmc, megatron, nanogpt, npy")  # fmt: skip
    for group in groups:
        assert group in page
    for preset in presets:  # each named with what it is
        assert re.search(rf"^\s+(\S+, )?{preset}\b.*\w", page, re.M), preset
    top = OmegaConf.load(REPO / "conf" / "config.yaml").keys() - {"defaults", "hydra"}
    for key in top:  # every top-level key, as `  key=` at the start of a line
        assert re.search(rf"^  {key}=", page, re.M), key
    assert "docs/" in page
    # its examples are ones the docs show, so test_example_runs runs them
    examples = [line.strip() for line in page.splitlines()
                if line.strip().startswith("python -m corpusprep ")]  # fmt: skip
    assert len(examples) >= 4, page
    shown = {e.command[: _comment_start(e.command)].strip() for e in EXAMPLES if not e.needs}
    for line in examples:
        assert line in shown, line


def test_the_layout_page_names_every_module_and_config():
    """docs/layout.md is the map of the code: a module or config option added without a
    line there leaves a newcomer looking for it (bpe, sentencepiece and reuse once were)."""
    page = (REPO / "docs" / "layout.md").read_text()
    words = set(re.findall(r"[\w.]+", page.replace(",", " ")))
    modules = [p for p in (REPO / "corpusprep").rglob("*.py") if "example" not in p.parts]
    missing = sorted(
        str(p.relative_to(REPO)) for p in modules
        if p.name not in ("__init__.py", "__main__.py") and p.name not in words
        and "_hydra_searchpath" not in p.parts
    )  # fmt: skip
    options = [p for p in (REPO / "conf").glob("*/*.yaml")]
    missing += sorted(str(p.relative_to(REPO)) for p in options if p.stem not in words)
    assert not missing, f"docs/layout.md does not name: {missing}"


def test_the_keys_page_names_every_sources_key():
    """Each source's own keys (its constructor's, and the shared ReadOptions) are in
    docs/keys.md: source.headers, taken with a '+' as the yaml has none, once was not."""
    import dataclasses
    import inspect

    from corpusprep.sources import ReadOptions
    from corpusprep.sources.file import FileSource
    from corpusprep.sources.files import FilesSource
    from corpusprep.sources.hf import HfSource
    from corpusprep.sources.url import UrlSource

    page = (REPO / "docs" / "keys.md").read_text()
    shared = [f.name for f in dataclasses.fields(ReadOptions)]
    missing = [name for name in shared if f"source.{name}" not in page]
    assert not missing, f"docs/keys.md does not name the shared source keys {missing}"
    for kind, cls in (("file", FileSource), ("files", FilesSource), ("hf", HfSource),
                      ("url", UrlSource)):  # fmt: skip
        row = next(line for line in page.splitlines() if line.startswith(f"| `{kind}` | `source."))
        params = inspect.signature(cls.__init__).parameters.values()
        named = [p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD]
        missing = [name for name in named if f"`source.{name}`" not in row]
        assert not missing, f"docs/keys.md's source={kind} row does not name {missing}"


def _python_blocks(page: str) -> list[str]:
    """The ```python blocks of a page, as written."""
    return re.findall(r"^```python\n(.*?)^```", (REPO / page).read_text("utf-8"), re.S | re.M)


def test_the_tiktoken_snippet_reads_the_folder_as_it_is_now(tmp_path, shakespeare):
    """Found by a newcomer's attack: docs/tokenizers.md reads a trained bpe's ranks with
    tiktoken's load_tiktoken_bpe, which keeps a copy of every file it reads in its cache
    (TIKTOKEN_CACHE_DIR, else a temporary folder) under the file's path. A folder made again
    at that path (another corpus, more merges) was read as the copy of the first: the other
    vocabulary, silently. The snippet, run after each of two runs into data/my_bpe1024,
    must encode as the folder's own tokenizer does."""
    from helpers import compose

    from corpusprep.prepare import prepare

    snippet = next(b for b in _python_blocks("docs/tokenizers.md") if "load_tiktoken_bpe" in b)
    check = snippet + (
        "\nimport corpusprep\n"
        "text = open('sample.txt', encoding='utf-8').read()\n"
        "mine = corpusprep.load('data/my_bpe1024').tokenizer.encode(text).tolist()\n"
        "assert enc.encode_ordinary(text) == mine, 'another vocabulary'\n"
    )
    text = shakespeare.read_text(encoding="utf-8")
    (tmp_path / "sample.txt").write_text(text[500_000:520_000], encoding="utf-8")
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken_cache"),
           "PYTHONPATH": str(REPO)}  # fmt: skip
    for part in (text[:300_000], text[-300_000:]):
        (tmp_path / "my.txt").write_text(part, encoding="utf-8")
        prepare(compose("source=file", f"source.path={tmp_path / 'my.txt'}", "tokenizer=bpe",
                        "tokenizer.vocab_size=1024", f"out_dir={tmp_path / 'data' / 'my_bpe1024'}",
                        "quiet=true"))  # fmt: skip
        r = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env,
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr


def test_the_keys_page_names_every_option_of_each_group():
    """Found by the newcomer attack: docs/keys.md's `tokenizer` row (the reference of every
    key) listed char, byte, tiktoken and hf, and not bpe, sentencepiece or reuse."""
    page = (REPO / "docs" / "keys.md").read_text()
    for group in ("source", "tokenizer", "executor", "format"):
        row = next(line for line in page.splitlines() if line.startswith(f"| `{group}` |"))
        options = sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))
        missing = [name for name in options if f"`{name}`" not in row]
        assert not missing, f"docs/keys.md's {group} row does not name {missing}"

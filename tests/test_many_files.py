"""A corpus of many small files (a code base, a folder of documents): the work done once per
file is kept to what each file needs, and gives what the slower, obvious way gave."""

from __future__ import annotations

import os
import random
from pathlib import Path

from corpusprep._paths import real_paths
from corpusprep.redact import redact_text, redact_urls_and_pairs


def _tree(root: Path) -> list[str]:
    """Folders and files reached through links to folders, links to files, links to links,
    a dangling link, a loop, and paths with '.' and '..' in them; every path to try."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    for folder in ("a", "a/b", "c"):
        (root / folder / "f.txt").write_text("x")
    (root / "to_b").symlink_to(root / "a" / "b")
    (root / "c" / "up").symlink_to("..")  # relative, back to root
    (root / "c" / "g.txt").symlink_to("../a/f.txt")
    (root / "c" / "h.txt").symlink_to("g.txt")  # a link to a link
    (root / "c" / "gone.txt").symlink_to("nowhere.txt")
    (root / "loop").symlink_to("loop")
    names = ["f.txt", "g.txt", "h.txt", "gone.txt", "missing.txt", ".", "..", "up", "loop"]
    folders = ["a", "a/b", "c", "to_b", "to_b/..", "c/up/a", "c/up/to_b/../b", "c/./up",
               "loop", "a/../c"]  # fmt: skip
    paths = [str(root / d / n) for d in folders for n in names]
    return paths + [str(root / "to_b") + "/", str(root / "c" / "up") + "//a/./f.txt"]


def test_real_paths_is_realpath_of_each(tmp_path, monkeypatch):
    paths = _tree(tmp_path)
    monkeypatch.chdir(tmp_path / "a")  # the relative ones (made from the root) mean others here
    paths += [os.path.relpath(p, tmp_path) for p in paths[:90]]
    assert real_paths(paths) == [os.path.realpath(p) for p in paths]


def test_redacting_a_path_without_a_name_or_url_leaves_it_as_it_is():
    """The quick way out (no '=', no ':': no 'name=value' and no URL) gives what the whole
    search gives, on texts made of the characters that matter."""
    rng = random.Random(1)
    alphabet = "ab/=:._-token?&@ \n,}"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert redact_text(text) == redact_urls_and_pairs(text), text


def test_a_names_suffix_is_what_path_suffix_says():
    """Formats and compression are told by the name's suffix, split without a Path per
    file; the same as Path.suffix, '..jsonl' and '.bashrc' included."""
    from pathlib import PurePosixPath

    from corpusprep.compression import suffix

    rng = random.Random(3)
    for _ in range(20_000):
        name = rng.choice(["", "d.x/", "/p/..q/"]) + "".join(
            rng.choice("ab.Z") for _ in range(rng.randint(1, 9))
        )
        if name.rsplit("/", 1)[-1] in (".", ".."):  # not a file's name
            continue
        assert suffix(name) == PurePosixPath(name).suffix.lower(), name

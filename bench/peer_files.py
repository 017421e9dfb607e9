"""llm.c's method (dev/data/fineweb.py) over a folder of text files, for bench_files.py.

    python bench/peer_files.py OUT_DIR ROOT

Written from the method's description, not copied: the sorted .txt files under ROOT are
the documents; a multiprocessing.Pool of os.cpu_count() workers reads each (UTF-8,
universal newlines, as nanoGPT's prepare.py reads a text) and tokenizes it with
pool.imap(tokenize, files, chunksize=16) as [eot] + enc.encode_ordinary(text) in uint16;
the results are written to OUT_DIR/tokens.bin in file order as they arrive. No split, no
shards, no header: nothing that would make it slower.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from pathlib import Path

import numpy as np
import tiktoken

enc = tiktoken.get_encoding("gpt2")
eot = enc._special_tokens["<|endoftext|>"]


def tokenize(path: str) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tokens = [eot]
    tokens.extend(enc.encode_ordinary(text))
    return np.array(tokens, dtype=np.uint16)


def main() -> int:
    out_dir, root = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    files = sorted(str(p) for p in Path(root).rglob("*.txt"))
    with mp.Pool(os.cpu_count()) as pool, open(os.path.join(out_dir, "tokens.bin"), "wb") as f:
        for tokens in pool.imap(tokenize, files, chunksize=16):
            f.write(tokens.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""llm.c's FineWeb method (dev/data/fineweb.py), on local JSONL.zst or Parquet files, for
bench_corpus.py.

    python bench/peer_llmc.py OUT_DIR FILE.jsonl.zst|FILE.parquet ...

Written from the method's description, not copied: the main process streams the documents
(one JSON object per line) and a multiprocessing.Pool of os.cpu_count() workers tokenizes
them with pool.imap(tokenize, docs, chunksize=16), where tokenize is
[eot] + enc.encode_ordinary(doc["text"]) as a uint16 numpy array (the end-of-text token
is prepended). The results come back in document order and are written as they arrive.

Differences from the real script, none of which makes it slower:
- the documents come from local JSONL.zst files, not from a Hugging Face dataset, or
  from local Parquet files (FineWeb's own form) read by pyarrow's iter_batches, not
  through `datasets`, which first converts them to an Arrow file;
- the output is one flat file, OUT_DIR/tokens.bin (uint16, no header), not shards of
  10^8 tokens with a 256-int32 header and the first shard as val. So it needs no
  10^8-token buffer in memory (200 MB) and does no train/val split;
- the pool has os.cpu_count() workers: llm.c takes max(1, os.cpu_count() - 2) and
  build-nanogpt os.cpu_count() // 2, which would be a single worker on 2 cores.
"""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import sys
from collections.abc import Iterator

import numpy as np
import tiktoken
import zstandard

enc = tiktoken.get_encoding("gpt2")
eot = enc._special_tokens["<|endoftext|>"]  # end of text token


def tokenize(doc: dict) -> np.ndarray:
    # tokenizes a single document and returns a numpy array of uint16 tokens
    tokens = [eot]  # the special <|endoftext|> token delimits all documents
    tokens.extend(enc.encode_ordinary(doc["text"]))
    tokens_np = np.array(tokens)
    assert (tokens_np >= 0).all() and (tokens_np < 2**16).all(), "token dictionary too large"
    return tokens_np.astype(np.uint16)


def documents(paths: list[str]) -> Iterator[dict]:
    """Every document of the files, in order, one at a time."""
    for path in paths:
        if path.endswith(".parquet"):  # the text column, a batch of rows at a time
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(1024, columns=["text"]):
                for text in batch.column(0).to_pylist():
                    yield {"text": text}
            continue
        with open(path, "rb") as raw:
            stream = zstandard.ZstdDecompressor().stream_reader(raw)
            for line in io.BufferedReader(stream, 1 << 16):
                if line.strip():
                    yield json.loads(line)


def main() -> int:
    out_dir, paths = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    docs = tokens = 0
    with mp.Pool(os.cpu_count()) as pool, open(os.path.join(out_dir, "tokens.bin"), "wb") as f:
        for ids in pool.imap(tokenize, documents(paths), chunksize=16):
            f.write(ids.tobytes())
            docs += 1
            tokens += len(ids)
    print(f"{docs:,} documents, {tokens:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The encoder's in-process ceiling: how fast the encoder alone gets through the same text
with the same number of workers, nothing else around it (no reading, parsing, writing or
start-up in the timed part). Every bench script runs it next to corpusprep and prints
corpusprep's whole-process throughput as a fraction of it.

    python bench/ceiling.py ENCODER WORKERS --text FILE
    python bench/ceiling.py ENCODER WORKERS --jsonl FILE.jsonl.zst|FILE.parquet ...
    python bench/ceiling.py ENCODER WORKERS --files FOLDER     (each .txt file a document)

ENCODER: tiktoken | riptoken | splintr (GPT-2 BPE) | char (corpusprep's char tokenizer, fitted on
the text) | sentencepiece=MODEL (sentencepiece's own encode, with that .model file, on
pieces of 16 KiB, batched: its BPE is fastest on short calls).
The text is read into memory first and cut into pieces of about 1 MiB (one text:
after a newline; documents: whole documents, batched); forked workers, each with its own
encoder loaded and warmed up before the clock starts and the pieces inherited at the fork
(nothing but an index goes through the pool's pipe), take pieces as they free up. Prints
one JSON line: seconds, bytes, tokens.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

# as corpusprep's command line does: no BLAS threads spinning beside the encoder
os.environ["OPENBLAS_NUM_THREADS"] = "1"

PIECE = 1 << 20  # characters per piece
SENTENCEPIECE_PIECE = 1 << 14  # sentencepiece's BPE is fastest on short calls

_encode = None  # the worker's encoder, set before forking


def _pieces_of_text(text: str, size: int = PIECE) -> list[list[str]]:
    def pieces():
        start = 0
        while start < len(text):
            end = text.rfind("\n", start, start + size) + 1 if len(text) - start > size else 0
            end = end if end > start else min(start + size, len(text))
            yield text[start:end]
            start = end

    return _batched(pieces())


def _pieces_of_documents(paths: list[str]) -> list[list[str]]:
    from common import document_texts  # (bench/ is this script's folder: on sys.path)

    return _batched(text for path in paths for text in document_texts(Path(path)))


def _batched(texts) -> list[list[str]]:
    """Texts in batches of about PIECE characters: a batch is what a worker takes at once."""
    batches, batch, size = [], [], 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= PIECE:
            batches.append(batch)
            batch, size = [], 0
    return batches + ([batch] if batch else [])


def _encoder(name: str, texts: list[list[str]]):
    if name == "char":
        from corpusprep.tokenizers.char import CharTokenizer

        tokenizer = CharTokenizer()
        tokenizer.fit("".join(sorted(set().union(*(set(t) for b in texts for t in b)))))
        return tokenizer.encode
    if name.startswith("sentencepiece="):
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=name.split("=", 1)[1])
        return sp.encode
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    if name == "splintr":  # with tiktoken's pattern as splintr takes it, as corpusprep does
        from corpusprep.tokenizers.tiktoken import TiktokenTokenizer

        return TiktokenTokenizer("gpt2", backend="splintr")._fast().encode
    if name == "riptoken":
        import riptoken

        core = riptoken.CoreBPE(enc._mergeable_ranks, enc._special_tokens, enc._pat_str)
        return riptoken.Encoding(core, enc).encode_ordinary
    return lambda text: enc.encode_to_numpy(text, disallowed_special=())


_batches: list[list[str]] = []  # the text, set before forking: each worker has it already


def _work(index: int) -> int:
    """Encode batch `index` (-1: a warm-up). The batches are the workers' own, inherited at
    the fork: sent through the pool's pipe instead, 1 MiB of text costs about a millisecond
    of pickling and copying, as long as char's encoder takes on it."""
    batch = ["warm up"] if index < 0 else _batches[index]
    return sum(len(_encode(text)) for text in batch)


def main(argv: list[str]) -> int:
    global _encode, _batches
    name, workers, kind, *paths = argv
    size = SENTENCEPIECE_PIECE if name.startswith("sentencepiece=") else PIECE
    if kind == "--text":
        texts = _pieces_of_text(Path(paths[0]).read_text(encoding="utf-8"), size)
    elif kind == "--files":  # a folder: each .txt file a document, read as a text is
        files = sorted(Path(paths[0]).rglob("*.txt"))
        texts = _batched(f.read_text(encoding="utf-8") for f in files)
    else:
        texts = _pieces_of_documents(paths)
    _encode, _batches = _encoder(name, texts), texts
    _encode("warm up: the first call builds tables")
    nbytes = sum(len(t.encode("utf-8")) for batch in texts for t in batch)
    with mp.get_context("fork").Pool(int(workers)) as pool:
        pool.map(_work, [-1] * int(workers))  # every worker forked and ready
        start = time.perf_counter()
        tokens = sum(pool.imap_unordered(_work, range(len(texts))))
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "bytes": nbytes, "tokens": tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

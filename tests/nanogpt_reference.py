"""nanoGPT's prepare scripts, as functions, to compare corpusprep's output against.

prepare_char is data/shakespeare_char/prepare.py (see the seed walk-through) with the
download replaced by a path argument and the three output paths made explicit; the
logic (open(), sorted set, int(n*0.9) split, uint16, pickle of vocab_size/itos/stoi)
is unchanged; prepare_bpe is data/shakespeare/prepare.py likewise. Run as a script it
does the same, for benchmarks:
    python nanogpt_reference.py char|bpe INPUT OUT_DIR [SPLIT]
"""

import os
import pickle
import sys

import numpy as np


def prepare_char(input_file_path, out_dir, split=0.9):
    with open(input_file_path, encoding="utf-8") as f:
        data = f.read()
    print(f"length of dataset in characters: {len(data):,}")

    # get all the unique characters that occur in this text
    chars = sorted(list(set(data)))
    vocab_size = len(chars)
    print(f"vocab size: {vocab_size:,}")

    # create a mapping from characters to integers
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}

    def encode(s):
        return [stoi[c] for c in s]  # encoder: take a string, output a list of integers

    # create the train and test splits
    n = len(data)
    train_data = data[: int(n * split)]
    val_data = data[int(n * split) :]

    # encode both to integers
    train_ids = encode(train_data)
    val_ids = encode(val_data)
    print(f"train has {len(train_ids):,} tokens")
    print(f"val has {len(val_ids):,} tokens")

    # export to bin files
    train_ids = np.array(train_ids, dtype=np.uint16)
    val_ids = np.array(val_ids, dtype=np.uint16)
    train_ids.tofile(os.path.join(out_dir, "train.bin"))
    val_ids.tofile(os.path.join(out_dir, "val.bin"))

    # save the meta information as well, to help us encode/decode later
    meta = {
        "vocab_size": vocab_size,
        "itos": itos,
        "stoi": stoi,
    }
    with open(os.path.join(out_dir, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)


def prepare_bpe(input_file_path, out_dir, split=0.9, encoding="gpt2"):
    """data/shakespeare/prepare.py: split the text by characters, encode each part."""
    import tiktoken

    with open(input_file_path, "r", encoding="utf-8") as f:  # noqa: UP015 - as nanoGPT
        data = f.read()
    n = len(data)
    train_data = data[: int(n * split)]
    val_data = data[int(n * split) :]

    # encode with tiktoken gpt2 bpe
    enc = tiktoken.get_encoding(encoding)
    train_ids = enc.encode_ordinary(train_data)
    val_ids = enc.encode_ordinary(val_data)
    print(f"train has {len(train_ids):,} tokens")
    print(f"val has {len(val_ids):,} tokens")

    # export to bin files
    train_ids = np.array(train_ids, dtype=np.uint16)
    val_ids = np.array(val_ids, dtype=np.uint16)
    train_ids.tofile(os.path.join(out_dir, "train.bin"))
    val_ids.tofile(os.path.join(out_dir, "val.bin"))


if __name__ == "__main__":
    kind, src, dst = sys.argv[1:4]
    split = float(sys.argv[4]) if len(sys.argv) > 4 else 0.9
    os.makedirs(dst, exist_ok=True)
    {"char": prepare_char, "bpe": prepare_bpe}[kind](src, dst, split)

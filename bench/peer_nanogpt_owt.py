"""nanoGPT's data/openwebtext/prepare.py, on local JSONL.zst or Parquet files, for
bench_corpus.py.

    python bench/peer_nanogpt_owt.py OUT_DIR FILE.jsonl.zst|FILE.parquet ...

The script's steps, unchanged: load_dataset (here the "json" or "parquet" builder on the given files
instead of the Hub's openwebtext), train_test_split(test_size=0.0005, seed=2357,
shuffle=True), .map(process, num_proc=...) where process is encode_ordinary with the
end-of-text token appended, then train.bin / val.bin written through np.memmap in 1024
batches of dset.shard(..., contiguous=True).with_format("numpy").

Differences: the input (local files), where the .bin files go (OUT_DIR), and num_proc,
which is os.cpu_count() instead of nanoGPT's 8. The Hugging Face datasets cache goes
wherever HF_DATASETS_CACHE says (bench_corpus.py points it into its workdir and deletes it
after each run, so every run converts the JSON to Arrow as a first run does).
"""

import os
import sys

import numpy as np
import tiktoken
from datasets import load_dataset  # huggingface datasets
from tqdm import tqdm

# number of workers in .map() call
# good number to use is ~order number of cpu cores // 2
num_proc = os.cpu_count()

# number of workers in load_dataset() call
num_proc_load_dataset = num_proc

if __name__ == "__main__":
    out_dir, data_files = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    builder = "parquet" if data_files[0].endswith(".parquet") else "json"
    dataset = load_dataset(builder, data_files=data_files, num_proc=num_proc_load_dataset)

    # owt by default only contains the 'train' split, so create a test split
    split_dataset = dataset["train"].train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    split_dataset["val"] = split_dataset.pop("test")  # rename the test split to val

    # we now want to tokenize the dataset. first define the encoding function (gpt2 bpe)
    enc = tiktoken.get_encoding("gpt2")

    def process(example):
        ids = enc.encode_ordinary(example["text"])  # encode_ordinary ignores any special tokens
        ids.append(enc.eot_token)  # add the end of text token, e.g. 50256 for gpt2 bpe
        # note: I think eot should be prepended not appended... hmm. it's called "eot" though...
        out = {"ids": ids, "len": len(ids)}
        return out

    # tokenize the dataset
    tokenized = split_dataset.map(
        process,
        remove_columns=["text"],
        desc="tokenizing the splits",
        num_proc=num_proc,
    )

    # concatenate all the ids in each dataset into one large file we can use for training
    for split, dset in tokenized.items():
        arr_len = np.sum(dset["len"], dtype=np.uint64)
        filename = os.path.join(out_dir, f"{split}.bin")
        dtype = np.uint16  # (can do since enc.max_token_value == 50256 is < 2**16)
        arr = np.memmap(filename, dtype=dtype, mode="w+", shape=(arr_len,))
        total_batches = 1024

        idx = 0
        for batch_idx in tqdm(range(total_batches), desc=f"writing {filename}"):
            # Batch together samples for faster write
            try:
                batch = dset.shard(
                    num_shards=total_batches, index=batch_idx, contiguous=True
                ).with_format("numpy")
            except IndexError:
                break
            arr_batch = np.concatenate(batch["ids"])
            # Write into mmap
            arr[idx : idx + len(arr_batch)] = arr_batch
            idx += len(arr_batch)
        arr.flush()

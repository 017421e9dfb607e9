"""Data shipped with corpusprep: tiny shakespeare and GPT-2's BPE ranks (r50k_base), so
that the nanoGPT presets work offline."""

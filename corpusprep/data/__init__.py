"""Data shipped with corpusprep: tiny shakespeare (the nanoGPT presets work offline)."""

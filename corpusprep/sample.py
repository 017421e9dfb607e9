"""The training sample of a tokenizer that learns from the corpus (tokenizer=bpe).

Gathered in the scan pass, which reads the whole corpus anyway. It must be the same for
any number of workers, shards or machines, and bounded in memory however big the corpus:

- The corpus is cut into units by its content alone: at every place a BPE pre-tokenizer
  cannot join text across (tiktoken.CUT_AT, roughly each line), so training on the units
  one by one counts the same pre-tokens as training on the whole text. Shard boundaries
  are such places too, so no unit ever spans two shards.
- Each document gives only the units that start in its first `max_doc_chars` characters
  (the last one cut there), as nanochat caps documents; one plain text is not capped.
- Every unit gets a priority: a keyed 64-bit hash of its text (the seed is the key). The
  sample is the run of lowest-priority units whose characters sum to at most `chars`.
  Each shard keeps its own such run and where it stopped, the driver merges them (see
  lowest): the result never depends on how the corpus was cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Optional

from corpusprep.tokenizers.tiktoken import CUT_AT_TEXT

# where a unit ends: tiktoken's CUT_AT, "\n" after a printable non-space ASCII character,
# before an ASCII letter or digit (tests/test_bpe_cuts.py proves it for each pattern)
UNIT_END = CUT_AT_TEXT


@dataclass(frozen=True)
class SampleRule:
    """How much to sample and how; the same for every shard of a run."""

    chars: int  # the sample's size in characters, at most
    max_doc_chars: Optional[int]  # a document gives units from this many characters; None: all
    seed: int = 0


Key = tuple[int, str]  # (priority, text): a total order (equal keys are equal texts)


@dataclass
class Sample:
    """Units of text in priority order (lowest first), with their priorities; `stop`: the
    key of the first unit left out for the budget (every unit after it is out; copies of
    its text, equal keys, may be in)."""

    priorities: list[int] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    seen_chars: int = 0  # characters of the units offered (within the budget), kept or not
    stop: Optional[Key] = None

    @property
    def chars(self) -> int:
        return sum(map(len, self.units))

    def __len__(self) -> int:
        return len(self.units)


def sample_rule(chars: object, max_doc_chars: object, seed: object) -> SampleRule:
    """The sample's keys of a tokenizer that trains (tokenizer.train_chars, max_doc_chars,
    seed), checked: positive sizes (max_doc_chars may be null), a seed the key holds."""
    from corpusprep.errors import UserError

    for key, value in (("train_chars", chars), ("max_doc_chars", max_doc_chars)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):  # fmt: skip
            raise UserError(f"tokenizer.{key}={value}: give a positive number of characters")
    if chars is None:
        raise UserError("tokenizer.train_chars=null: give a positive number of characters")
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**63:
        raise UserError(f"tokenizer.seed={seed}: give an integer between -2**63 and 2**63-1")
    return SampleRule(chars, max_doc_chars, seed)


def priority(text: str, seed: int) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=_key(seed)).digest()
    return int.from_bytes(digest, "little")


@cache
def _key(seed: int) -> bytes:
    return seed.to_bytes(16, "little", signed=True)


def lowest(sample: Sample, budget: int) -> None:
    """Keep the lowest-priority run of `sample`'s units within `budget` characters: in
    key order, up to the first unit that would go over it (whose key becomes the stop), or
    up to the stop already known. Why this is exact across shards: a shard's stop unit
    goes over the budget with its own shard's units alone, so the whole corpus's run
    stops there or before (and holds no more copies of its text than that shard kept);
    below the lowest stop, every shard kept every unit."""
    order = sorted(range(len(sample.units)), key=lambda i: (sample.priorities[i], sample.units[i]))
    kept, total, stop = [], 0, sample.stop
    for i in order:
        key = (sample.priorities[i], sample.units[i])
        if stop is not None and key > stop:  # copies of the stop's text may still fit
            break
        total += len(sample.units[i])
        if total > budget:
            stop = key
            break
        kept.append(i)
    sample.priorities = [sample.priorities[i] for i in kept]
    sample.units = [sample.units[i] for i in kept]
    sample.stop = stop


class Sampler:
    """Gathers one shard's sample while its text streams past (see the module's notes)."""

    def __init__(self, rule: SampleRule) -> None:
        self.rule = rule
        self.sample = Sample()
        self._held = 0  # characters held in units not yet trimmed

    def document(self, pieces: Iterable[str], before: Optional[int] = 0) -> Iterator[str]:
        """Pass a document's (or document part's) text pieces through, taking its units.
        `before`: characters of the document before this part (None: more than the cap)."""
        cap = self.rule.max_doc_chars
        if before is None or (cap is not None and before >= cap):
            yield from pieces
            return
        room = None if cap is None else cap - before  # characters this part may still give
        buf, taken = "", 0  # text since the last unit's end; characters given so far
        for piece in pieces:
            yield piece
            if room is not None and taken >= room:
                continue
            # a "\n" that ended buf had no next character yet: search again from it
            search = max(len(buf) - 1, 0)
            buf += piece
            done = 0
            for m in UNIT_END.finditer(buf, search):
                taken = self._unit(buf[done : m.end()], taken, room)
                done = m.end()
            buf = buf[done:]
        if buf:
            self._unit(buf, taken, room)

    def _unit(self, text: str, taken: int, room: Optional[int]) -> int:
        """Take one unit (cut where the document's cap falls); the characters given after it."""
        if room is not None:
            text = text[: max(room - taken, 0)]
        # a unit longer than the whole budget is never in the sample: left out at once
        if text and len(text) <= self.rule.chars:
            self.sample.seen_chars += len(text)
            rank = priority(text, self.rule.seed)
            stop = self.sample.stop
            if stop is None or (rank, text) <= stop:  # else it is out already
                self.sample.priorities.append(rank)
                self.sample.units.append(text)
                self._held += len(text)
                if self._held > self.rule.chars * 5 // 4:  # bounded: trim now and then
                    self._trim()
        return taken + len(text)

    def _trim(self) -> None:
        lowest(self.sample, self.rule.chars)
        self._held = self.sample.chars

    def result(self) -> Sample:
        self._trim()
        return self.sample


class Merger:
    """Shards' samples merged as they come (the driver, during the scan): trimmed to the
    budget whenever it holds twice that, so memory stays bounded and sorting is rare."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.merged = Sample()
        self._held = 0

    def add(self, sample: Sample) -> None:
        m = self.merged
        m.priorities += sample.priorities
        m.units += sample.units
        m.seen_chars += sample.seen_chars
        if sample.stop is not None and (m.stop is None or sample.stop < m.stop):
            m.stop = sample.stop
        self._held += sample.chars
        if self._held > 2 * self.budget:
            lowest(m, self.budget)
            self._held = m.chars

    def result(self) -> Sample:
        lowest(self.merged, self.budget)
        return self.merged


def merge_samples(samples: Iterable[Sample], budget: int) -> Sample:
    """The run of lowest-priority units within `budget` over several shards' samples."""
    merger = Merger(budget)
    for sample in samples:
        merger.add(sample)
    return merger.result()

"""Prefix sharing in a run's prompts, from their fingerprints (see `fingerprint`).

Two kinds of sharing, both measured in characters of prompt text:
- identical: the longest run of leading chunks a prompt has in common with another one.
  This is what a prefix cache can hit (it hashes whole blocks of a byte-identical prefix).
- near-identical: a prompt diverges from the others at chunk d (a timestamp, a user name,
  a request id), but within `MAX_HOLE_CHUNKS` chunks it re-joins a sequence of at least
  `MIN_TAIL_CHUNKS` chunks that other prompts also carry right after *their* divergence.
  The cache cannot use that tail; moving the differing span after it (or making it
  identical) would let it. Content-defined chunks re-align after a span of any length.

Everything is computed on two tries of chunk hashes: the prompts themselves, and the tails
that start 1..MAX_HOLE_CHUNKS chunks after each prompt's divergence point (plus the whole
prompts, so a prompt with an extra leading span re-joins prompts that lack it). A trie node
counts the distinct prompts passing through it and remembers the first (by send order), so
"shared with any other prompt" (count >= 2) and "shared with an earlier prompt" (first <
this one, i.e. a hit an infinitely large cache would have) are both one walk.

Replay groups: a trace request carries one shared token stream (`prefix_group`). Each
shared trie node belongs to the stream of its heaviest shared child, so requests that
share a stem and then a longer branch land in the same group with different prefix
lengths, which is exact along a branch and loses only sharing between sibling branches.
Invariant: every char count here is <= the prompt's fingerprinted characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_HOLE_CHUNKS = 3  # a differing span of up to ~3 chunks (~150 characters)
MIN_TAIL_CHUNKS = 2  # and at least ~2 chunks (~100 characters) shared after it


@dataclass(frozen=True, slots=True)
class PromptShape:
    """One prompt's fingerprint (chunk hashes and lengths, in order), in send order."""

    hashes: tuple[int, ...]
    chars: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Sharing:
    """What one prompt shares. `hole_*` are character offsets of the differing span (None
    when the prompt has no near-identical sharing); `group` / `near_group` are replay
    stream ids (-1: none) as the prompts are and as they would be with the span moved."""

    shared_chars: int
    hit_chars: int
    near_shared_chars: int
    near_hit_chars: int
    hole_start_chars: int | None
    hole_end_chars: int | None
    group: int
    near_group: int


class _Trie:
    """Chunk-hash trie with per-node distinct-prompt counts (node 0 is the root)."""

    def __init__(self) -> None:
        self.children: dict[tuple[int, int], int] = {}
        self.count = [0]
        self.first = [-1]
        self.last = [-1]
        self.parent = [-1]

    def insert(self, seq: Sequence[int], who: int) -> list[int]:
        """Insert `seq` for prompt `who`; returns the node ids along it (depth 1..len)."""
        node, path = 0, []
        for h in seq:
            child = self.children.get((node, h))
            if child is None:
                child = len(self.count)
                self.children[(node, h)] = child
                self.count.append(0)
                self.first.append(who)
                self.last.append(-1)
                self.parent.append(node)
            if self.last[child] != who:
                self.last[child] = who
                self.count[child] += 1
            node = child
            path.append(node)
        return path

    def streams(self) -> list[int]:
        """stream[node] for shared nodes (count >= 2): the deepest node reached by always
        following the heaviest shared child (ties: the first created); -1 elsewhere."""
        best_child: dict[int, int] = {}
        for (parent, _), child in self.children.items():
            if self.count[child] >= 2:
                old = best_child.get(parent)
                if old is None or self.count[child] > self.count[old]:
                    best_child[parent] = child
        stream = [-1] * len(self.count)
        for node in range(len(self.count) - 1, 0, -1):  # children are created after parents
            if self.count[node] >= 2:
                child = best_child.get(node)
                stream[node] = node if child is None else stream[child]
        return stream


def _depths(path: list[int], trie: _Trie, who: int) -> tuple[int, int]:
    """(deepest depth shared with any other prompt, deepest shared with an earlier one)."""
    any_depth = earlier = 0
    for depth, node in enumerate(path, 1):
        if trie.count[node] < 2:
            break
        any_depth = depth
        if trie.first[node] < who:
            earlier = depth
    return any_depth, earlier


def analyse(shapes: Sequence[PromptShape]) -> list[Sharing]:
    """Sharing of every prompt with the others (inputs in send order)."""
    trie = _Trie()
    paths = [trie.insert(s.hashes, i) for i, s in enumerate(shapes)]
    depths = [_depths(p, trie, i) for i, p in enumerate(paths)]
    tails = _Trie()
    tail_paths: list[list[tuple[int, list[int]]]] = []
    for i, s in enumerate(shapes):
        d = depths[i][0]
        starts = [d + k for k in range(1, MAX_HOLE_CHUNKS + 1) if d + k < len(s.hashes)]
        tails.insert(s.hashes, i)  # whole prompts too: a prompt with an extra leading span re-joins them
        tail_paths.append([(start, tails.insert(s.hashes[start:], i)) for start in starts])
    streams, tail_streams = trie.streams(), tails.streams()
    out = []
    for i, s in enumerate(shapes):
        any_depth, earlier = depths[i]
        offsets = _offsets(s.chars)
        group = streams[paths[i][any_depth - 1]] if any_depth else -1
        best = None  # (tail depth, start, tail node, earlier tail depth)
        for start, path in tail_paths[i]:
            t_any, t_earlier = _depths(path, tails, i)
            if t_any >= MIN_TAIL_CHUNKS and (best is None or t_any > best[0]):
                best = (t_any, start, path[t_any - 1], t_earlier)
        shared, hit = offsets[any_depth], offsets[earlier]
        if best is None:
            out.append(Sharing(shared, hit, shared, hit, None, None, group, group))
            continue
        t_any, start, node, t_earlier = best
        tail_chars = offsets[start + t_any] - offsets[start]
        tail_hit = offsets[start + t_earlier] - offsets[start] if t_earlier >= MIN_TAIL_CHUNKS else 0
        near_group = _near_group_id(group, tail_streams[node])
        out.append(
            Sharing(
                shared,
                hit,
                shared + tail_chars,
                hit + tail_hit,
                offsets[any_depth],
                offsets[start],
                group,
                near_group,
            )
        )
    return _renumber(out)


def _offsets(chars: Sequence[int]) -> list[int]:
    out = [0]
    for c in chars:
        out.append(out[-1] + c)
    return out


def _near_group_id(stem: int, tail: int) -> int:
    """A collision-free id for the pair (stem stream, tail stream); renumbered afterwards."""
    return -2 - ((stem + 1) * (1 << 32) + tail)


def _renumber(rows: list[Sharing]) -> list[Sharing]:
    """Dense group ids 0..G-1 (baseline groups first), -1 kept for "no group"."""
    ids: dict[int, int] = {}

    def dense(g: int) -> int:
        return -1 if g == -1 else ids.setdefault(g, len(ids))

    for r in rows:
        dense(r.group)
    return [
        Sharing(
            r.shared_chars,
            r.hit_chars,
            r.near_shared_chars,
            r.near_hit_chars,
            r.hole_start_chars,
            r.hole_end_chars,
            dense(r.group),
            dense(r.near_group),
        )
        for r in rows
    ]


def prompt_shape(hashes: object, chars: object) -> PromptShape:
    if hashes is None or (isinstance(hashes, float) and math.isnan(hashes)):
        return PromptShape((), ())
    return PromptShape(tuple(int(h) for h in hashes), tuple(int(c) for c in chars))  # type: ignore[union-attr]

"""Which deployment facts each verdict and the replays need, and what to say when one is
unknown: the verdict is not issued (or the replay not run), and the advice names the fact
and the `--deployment` key that states it.

Needs, and why:
- quantize_kv_cache: the cache dtype (is it wider than 8 bits?) and the pool (how much more
  fits);
- add_memory: the pool and its block size (demand is counted in blocks);
- raise_memory_utilization: gpu_memory_utilization, and the catalogue model and GPU the
  arithmetic runs on;
- cut_context: max_model_len, the allocator (a contiguous one reserves max_model_len per
  request, a paged one does not) and the pool;
- the replays of a --target run: the pool, and what could bind or time a step that the server
  does not publish (`replay_basis`: the catalogue model and GPU only without the server's
  per-request timings). The bundled engine's and simulator's configuration is known field by
  field, so for them this never bites.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.advisor.deployment import Deployment
from harness.bundle.deployment_option import supply
from harness.bundle.finding import Finding

NEEDS: dict[str, tuple[str, ...]] = {
    "quantize_kv_cache": ("kv_cache_dtype", "num_blocks"),
    "add_memory": ("num_blocks", "block_size"),
    "raise_memory_utilization": ("gpu_memory_utilization", "model", "gpu"),
    "cut_context": ("max_model_len", "allocator", "num_blocks", "block_size"),
}
REPLAYS = "replays"


@dataclass(frozen=True, slots=True)
class MissingFact:
    fact: str
    needed_for: list[str]
    supply: str  # e.g. "--deployment max-num-seqs=256"

    def to_json(self) -> dict:
        return {"fact": self.fact, "needed_for": list(self.needed_for), "supply": self.supply}


def missing_for(dep: Deployment, action: str) -> list[str]:
    return dep.unknown(NEEDS.get(action, ()))


def not_issued(action: str, missing: list[str]) -> Finding:
    how = ", ".join(supply(f).removeprefix("--deployment ") for f in missing)
    return Finding(
        "rule_lacks_facts",
        f"{action}: not issued: {', '.join(missing)} unknown (state it: --deployment {how})",
        subject=action,
    )


def collect(needed: dict[str, list[str]]) -> list[MissingFact]:
    """{what: [missing facts]} -> one MissingFact per fact, in first-seen order."""
    by_fact: dict[str, list[str]] = {}
    for what, facts in needed.items():
        for f in facts:
            by_fact.setdefault(f, []).append(what)
    return [MissingFact(f, users, supply(f)) for f, users in by_fact.items()]

"""K shared system prompts of P tokens; every request picks one and adds its own user turn.

The prefix-cache workload: with caching on, all but the first request per prefix should hit
~P cached tokens. Prefix texts depend only on --seed and the calibration, which every worker
derives identically, so the prefixes are shared across worker processes too (and a new
seed, which `kvscope run` draws per run, gives new prefixes: a rerun starts cold). The user
turn and the output length vary within --length-spread of their means.

    locust -f loadtests/shared_prefix.py --host URL --num-prefixes 4 --prefix-tokens 512
"""

from __future__ import annotations

from harness.load import LLMUser, RequestSpec, register_workload, seeded_text, spread, text

register_workload("shared_prefix")
PREFIX_SEED_BASE = 1_000_003


class SharedPrefixUser(LLMUser):
    workload = "shared_prefix"
    probe_in_system = True  # the prefix is a system message: calibrate with that template path

    def prefixes(self) -> list[str]:
        cached = self.ctx.cache.get("prefixes")
        if cached is None:
            words = self.calibration.words_for(int(self.option("prefix_tokens")), include_overhead=False)
            base = PREFIX_SEED_BASE * (self.ctx.opts.seed + 1)
            cached = self.ctx.cache["prefixes"] = [
                seeded_text(base + i, words) for i in range(int(self.option("num_prefixes")))
            ]
        return cached

    def next_request(self) -> RequestSpec:
        prefixes = self.prefixes()
        index = self.rng.randrange(len(prefixes))
        relative = float(self.option("length_spread"))
        suffix = spread(self.rng, int(self.option("suffix_tokens")), relative)
        target = int(self.option("prefix_tokens")) + suffix + round(self.calibration.overhead)
        _, output = self.fit_lengths(target, spread(self.rng, int(self.option("output_tokens")), relative))
        user_turn = text(self.rng, self.calibration.words_for(suffix, include_overhead=False))
        return RequestSpec(
            prompt=user_turn,
            system=prefixes[index],
            max_tokens=output,
            prefix_id=index,
            target_prompt_tokens=target,
            target_output_tokens=output,
        )

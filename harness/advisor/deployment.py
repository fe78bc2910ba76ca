"""The deployment a run measured, as the advisor works with it: resolved from run.json's
deployment facts and the samples the exporter took, never from defaults.

Sources, in order: the facts the run recorded (`harness.bundle.deployment`: the bundled
engine's and simulator's configuration, or what a --target server and the user stated; what
`kvscope advise --deployment` adds is merged in before `resolve`), then what the server's own
samples show (`kv_capacity_blocks` and `kv_block_size_tokens`, which beat any re-derivation;
for a --target server also vLLM's cache_config_info dtype and gpu_memory_utilization).
Settings no source stated are listed in `unstated` (engine) and `catalogue_unstated`: they
are reported as unknown, and what needs one (a verdict, a replay) is not done
(`harness.advisor.facts`); the EngineConfig defaults in `engine` stand in only for fields
nothing reads.

Invariant: a model or GPU the catalogue does not know raises AdvisorError (one line).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import pandas as pd

from harness.advisor.errors import AdvisorError
from harness.bundle.deployment import DeploymentFacts
from reference_engine.catalogue import CatalogueError, get_gpu, get_model, kv_dtype_bytes
from reference_engine.config import EngineConfig
from reference_engine.model_dtype import resolve_model_dtype
from reference_engine.sim.spec import SimSpec

ENGINE_FIELDS = frozenset(f.name for f in fields(EngineConfig))
CATALOGUE_FIELDS = frozenset(f.name for f in fields(SimSpec))


@dataclass(frozen=True, slots=True)
class Deployment:
    """The serving setup a run measured.

    `model` / `gpu` are catalogue names when known (the simulated pair for --simulate runs;
    for the real bundled engine `model` is its catalogue twin, e.g. smollm2-135m, and `gpu`
    None). `num_blocks` is the pool the engine had, null block included; None when neither
    the samples nor the facts say. `bundled` is False for --target runs. `engine` is the
    configuration replays run with; its fields in `unstated` are the simulator's defaults,
    not facts about the server.
    """

    engine: EngineConfig
    bundled: bool
    simulated: bool
    model: str | None
    gpu: str | None
    tp: int = 1
    gpu_memory_utilization: float | None = None
    weight_dtype: str = "auto"
    num_blocks: int | None = None
    max_model_len: int | None = None
    unstated: frozenset[str] = frozenset()
    catalogue_unstated: frozenset[str] = frozenset()

    def known(self, name: str) -> Any:
        """An engine setting when some source stated it, else None."""
        return None if name in self.unstated else getattr(self.engine, name)

    def unknown(self, names: tuple[str, ...]) -> list[str]:
        """Which of these facts no source stated. Names are EngineConfig fields, except
        `model` and `gpu` (catalogue names), `tensor_parallel_size` and
        `gpu_memory_utilization` (SimSpec's), and `num_blocks` and `max_model_len`, known
        from the samples as well as the facts."""
        present = {
            "model": self.model,
            "gpu": self.gpu,
            "num_blocks": self.num_blocks,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }
        return [
            n
            for n in names
            if (present[n] is None if n in present else n in self.catalogue_unstated or n in self.unstated)
        ]

    @property
    def stated_kv_dtype(self) -> str | None:
        return None if "kv_cache_dtype" in self.unstated else self.kv_dtype

    @property
    def kv_dtype(self) -> str:
        """The cache's element type in catalogue spelling. The real bundled engine's `auto` is
        its compute dtype as this machine resolves it (on a CPU float32, or bfloat16 where the
        CPU computes it natively and the weights are not fp16); a simulated or foreign `auto`
        is 16-bit, as in vLLM."""
        name = self.engine.kv_cache_dtype
        if name == "auto" and self.bundled and not self.simulated:
            return resolve_model_dtype(
                self.engine.dtype, self.engine.device, quantization=self.engine.quantization
            )
        return name

    @property
    def gpu_sized(self) -> bool:
        """The pool follows vLLM's arithmetic for a catalogue model on a catalogue GPU."""
        return self.model is not None and self.gpu is not None

    @property
    def kv_element_bytes(self) -> int:
        return kv_dtype_bytes(self.kv_dtype)


def _known_model(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return get_model(name).name
    except CatalogueError:
        return None


def _last_int(server: pd.DataFrame, column: str) -> int | None:
    if column not in server.columns:
        return None
    values = pd.to_numeric(server[column], errors="coerce").dropna()
    return int(values.iloc[-1]) if len(values) else None


def _catalogue_kv_dtype(name: str) -> str:
    """An engine's cache dtype in the catalogue's terms (fp8_ds_mla, nvfp4... count as 8-bit
    or narrower: the advisor only needs to know the cache is already quantized)."""
    try:
        kv_dtype_bytes(name)
        return name
    except CatalogueError:
        narrow = any(m in name.lower() for m in ("fp8", "int8", "fp4", "int4", "e4m3", "e5m2"))
        return "fp8" if narrow else "auto"


def _last_value(server: pd.DataFrame, column: str) -> Any:
    if column not in server.columns:
        return None
    values = server[column].dropna()
    return values.iloc[-1] if len(values) else None


def resolve(facts: DeploymentFacts | None, server: pd.DataFrame) -> Deployment:
    """The Deployment of a run (see the module doc for the order of sources). A run that
    recorded no facts is a server nothing is known about."""
    facts = facts or DeploymentFacts("target")
    stated = facts.values("engine")
    config = replace(EngineConfig(), **stated)
    unstated = ENGINE_FIELDS - stated.keys()
    simulated = facts.server == "bundled simulator"
    catalogue = facts.values("catalogue")
    model = gpu = None
    tp, gmu, weight_dtype = 1, None, "auto"
    if catalogue:
        tp = int(catalogue.get("tensor_parallel_size", tp))
        gmu = catalogue.get("gpu_memory_utilization")
        weight_dtype = str(catalogue.get("weight_dtype", weight_dtype))
        try:
            model = get_model(catalogue["model"]).name if catalogue.get("model") else None
            gpu = get_gpu(catalogue["gpu"]).name if catalogue.get("gpu") else None
        except CatalogueError as exc:
            raise AdvisorError(f"run.json: deployment: {exc}") from None
    elif facts.bundled:
        model = _known_model(config.model)
    num_blocks = _last_int(server, "kv_capacity_blocks") or config.num_blocks
    block_size = _last_int(server, "kv_block_size_tokens")
    if block_size:  # the server's own figure beats any configuration
        config = replace(config, block_size=block_size)
        unstated -= {"block_size"}
    if facts.bundled and num_blocks is None and not simulated and config.kv_cache_memory is None:
        num_blocks = config.default_num_blocks
    if not facts.bundled:  # what the server itself reports (vLLM's cache_config_info)
        dtype, reported_gmu = (
            _last_value(server, "kv_cache_dtype"),
            _last_value(server, "gpu_memory_utilization"),
        )
        if isinstance(dtype, str) and dtype:
            config = replace(config, kv_cache_dtype=_catalogue_kv_dtype(dtype))  # type: ignore[arg-type]
            unstated -= {"kv_cache_dtype"}
        if isinstance(reported_gmu, float) and 0 < reported_gmu <= 1:
            gmu = reported_gmu
    max_len = config.max_model_len
    if max_len is None and model is not None and facts.bundled:
        max_len = get_model(model).max_context  # the engine's own default: the model's context
    catalogue_unstated = frozenset() if facts.bundled else CATALOGUE_FIELDS - catalogue.keys()
    return Deployment(
        config,
        facts.bundled,
        simulated,
        model,
        gpu,
        tp,
        gmu,
        weight_dtype,
        num_blocks,
        max_len,
        unstated,
        catalogue_unstated,
    )

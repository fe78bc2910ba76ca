"""What an engine core is built from (`CoreLaunch`), and building it.

The same record starts a core in its own process (sent as JSON on the child's stdin) and
in a thread of the server, so both modes build exactly the same engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from reference_engine.config import EngineConfig
from reference_engine.core.messages import CoreReady
from reference_engine.engine import LLMEngine
from reference_engine.sim.spec import SimSpec


class CoreLaunch(msgspec.Struct, omit_defaults=True):
    """`sim` set: the simulator's executor and pool sizing instead of a model.
    `step_records_path` (benchmarks): where a simulated core writes its step records
    (`SimExecutor.records`, JSON) when it shuts down."""

    config: EngineConfig
    sim: SimSpec | None = None
    step_records_path: str | None = None


@dataclass(slots=True)
class BuiltCore:
    engine: LLMEngine
    ready: CoreReady
    on_step_start: Callable[[float], None] | None = None
    step_records: Callable[[], list] | None = None  # the simulator's, oldest first


def build_core(launch: CoreLaunch, pid: int = 0) -> BuiltCore:
    """Raises ConfigError, ModelLoadError or OSError when the engine cannot be built."""
    config, spec = launch.config, launch.sim
    if spec is not None:
        from reference_engine.sim.engine import build_sim_engine

        sim = build_sim_engine(spec, config, detokenize=False)
        source = f"simulated {sim.model_name} on {spec.tensor_parallel_size} x {spec.gpu}"
        ready = ready_of(sim.engine, spec.model, source, sim.kv_cache_dtype, "simulated", pid)
        return BuiltCore(sim.engine, ready, sim.executor.begin_step, lambda: list(sim.executor.records))
    from reference_engine.engine_factory import build_engine

    built = build_engine(config, detokenize=False)
    ready = ready_of(
        built.engine, config.model, built.loaded.source, built.kv_cache_dtype, built.weights, pid
    )
    return BuiltCore(built.engine, ready)


def ready_of(
    engine: LLMEngine,
    name: str,
    source: str = "",
    kv_cache_dtype: str = "auto",
    weights: str = "",
    pid: int = 0,
) -> CoreReady:
    """What the server is told about a built engine (also for engines that tests build)."""
    return CoreReady(
        model_name=name,
        model_source=source or name,
        max_model_len=engine.max_model_len,
        vocab_size=engine.vocab_size,
        num_blocks=engine.kv.pool.num_blocks,
        block_size=engine.block_size,
        kv_cache_dtype=kv_cache_dtype,
        enable_prefix_caching=engine.kv.enable_caching,
        allocator=engine.allocator,
        kv_cache_metrics=engine.kv.pool.residency is not None,
        kv_events_config=(
            engine.kv_event_publisher.stated_config() if engine.kv_event_publisher is not None else None
        ),
        weights=weights,
        pid=pid,
    )


def write_step_records(launch: CoreLaunch, built: BuiltCore) -> None:
    if launch.step_records_path is not None and built.step_records is not None:
        with open(launch.step_records_path, "wb") as f:
            f.write(msgspec.json.encode(built.step_records()))

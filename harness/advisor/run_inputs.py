"""What the advisor reads from a results bundle: the frames and the deployment that ran.

The deployment is rebuilt from run.json the way the run started it (`kvscope run` writes
`bundled_engine` and its RunConfig under `config`: `model`, `engine_argv`): the bundled
engine's flags (`engine_argv`, parsed by the engine's own `serve` parser so defaults and spellings
cannot drift), the simulation spec when it was a `--simulate` run, and the pool size the
exporter actually saw (`kv_capacity_blocks`, which beats any re-derivation). A structured
`engine` / `simulation` object in run.json, when present, overrides the parsed flags.

Invariants: a bundle without run.json, requests.parquet or server.parquet, or naming a
model or GPU the catalogue does not know, raises AdvisorError with a one-line message (the
CLI turns it into exit 2); nothing here mutates the bundle folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from reference_engine.catalogue import CatalogueError, get_gpu, get_model, kv_dtype_bytes
from reference_engine.config import EngineConfig

REQUIRED_FILES = ("run.json", "requests.parquet", "server.parquet")


class AdvisorError(ValueError):
    """Input the advisor cannot work from; the message says what is wrong and where."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """The serving setup a run measured.

    `model` / `gpu` are catalogue names when known (the simulated pair for --simulate runs;
    for the real bundled engine `model` is its catalogue twin, e.g. smollm2-135m, and `gpu`
    None). `num_blocks` is the pool the engine had, null block included; None when neither
    the samples nor the flags say. `bundled` is False for --target runs, whose flags the
    advisor can only know from the command line of `kvscope advise`.
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

    @property
    def kv_dtype(self) -> str:
        """The cache's element type in catalogue spelling (the real engine's `auto` is its
        compute dtype, float32 on CPU; a simulated `auto` is 16-bit, as in vLLM)."""
        name = self.engine.kv_cache_dtype
        if name == "auto":
            real_cpu_engine = self.bundled and not self.simulated and self.engine.dtype == "float32"
            return "float32" if real_cpu_engine else "auto"
        return name

    @property
    def gpu_sized(self) -> bool:
        """The pool follows vLLM's arithmetic for a catalogue model on a catalogue GPU."""
        return self.model is not None and self.gpu is not None

    @property
    def kv_element_bytes(self) -> int:
        return kv_dtype_bytes(self.kv_dtype)


@dataclass(frozen=True, slots=True)
class RunInputs:
    run: dict[str, Any]
    requests: pd.DataFrame  # measured requests only (calibration probes dropped)
    server: pd.DataFrame
    deployment: Deployment
    path: Path | None = None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AdvisorError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise AdvisorError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AdvisorError(f"{path} must hold a JSON object")
    return data


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise AdvisorError(f"cannot read {path}: {exc}") from None


def load(directory: str | Path) -> RunInputs:
    d = Path(directory)
    if not d.is_dir():
        raise AdvisorError(f"{d} is not a results bundle folder")
    missing = [name for name in REQUIRED_FILES if not (d / name).exists()]
    if missing:
        raise AdvisorError(f"{d} is not a complete results bundle: missing {', '.join(missing)}")
    run = _read_json(d / "run.json")
    requests, server = _read_parquet(d / "requests.parquet"), _read_parquet(d / "server.parquet")
    for frame, name, needed in (
        (requests, "requests.parquet", ("send_time_unix", "prompt_tokens", "output_tokens")),
        (server, "server.parquet", ("time_unix",)),
    ):
        absent = [c for c in needed if c not in frame.columns]
        if absent:
            raise AdvisorError(f"{d / name} lacks column(s) {', '.join(absent)}")
    return from_frames(run, requests, server, d)


def from_frames(
    run: dict[str, Any], requests: pd.DataFrame, server: pd.DataFrame, path: Path | None = None
) -> RunInputs:
    if "phase" in requests.columns:
        requests = requests[requests["phase"].fillna("measure") == "measure"]
    requests = requests.sort_values("send_time_unix", kind="stable").reset_index(drop=True)
    server = server.sort_values("time_unix", kind="stable").reset_index(drop=True)
    return RunInputs(run, requests, server, deployment(run, server), path)


def _engine_argv(run: dict[str, Any]) -> list[str]:
    """The engine's command line after `serve` as the run started it (run.json `commands`),
    else the recorded engine flags."""
    command = (run.get("commands") or {}).get("engine") if isinstance(run.get("commands"), dict) else None
    if isinstance(command, list) and "serve" in command and all(isinstance(a, str) for a in command):
        return command[command.index("serve") + 1 :]
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    argv = run.get("engine_argv", config.get("engine_argv")) or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise AdvisorError("run.json: engine_argv must be a list of strings")
    return argv


def _parse_serve_flags(model: str | None, argv: list[str]) -> argparse.Namespace:
    from reference_engine.server.serve_cli import register_serve

    parser = argparse.ArgumentParser(prog="kvscope", exit_on_error=False)
    register_serve(parser.add_subparsers(dest="cmd"))
    full = ["serve", *(["--model", model] if model else []), *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args, _ = parser.parse_known_args(full)
    except (argparse.ArgumentError, SystemExit) as exc:
        detail = err.getvalue().strip().splitlines()[-1:] or [str(exc)]
        raise AdvisorError(f"run.json: engine flags {' '.join(argv)!r} do not parse: {detail[0]}") from None
    return args


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


def deployment(run: dict[str, Any], server: pd.DataFrame) -> Deployment:
    """The Deployment of a run (see the module doc for the order of sources)."""
    from reference_engine.engine_args import engine_config_from_args as config_from_args

    config_section = run.get("config") if isinstance(run.get("config"), dict) else {}
    bundled = (
        bool(run["bundled_engine"])
        if "bundled_engine" in run
        else not (run.get("target") or config_section.get("target"))
    )
    model_flag = run.get("model") or config_section.get("model")
    args = _parse_serve_flags(model_flag if bundled else None, _engine_argv(run) if bundled else [])
    config = config_from_args(args)
    overrides = {
        f.name: v for f in fields(EngineConfig) if (v := (run.get("engine") or {}).get(f.name)) is not None
    }
    config = replace(config, **overrides) if overrides else config
    sim = dict(run.get("simulation") or {})
    simulated = bool(sim) or bool(getattr(args, "simulate", False))
    model = gpu = None
    tp, gmu, weight_dtype = 1, None, "auto"
    if simulated:
        model, gpu = sim.get("model", args.sim_model), sim.get("gpu", args.sim_gpu)
        tp = int(sim.get("tensor_parallel_size", args.tensor_parallel_size))
        gmu = float(sim.get("gpu_memory_utilization", args.gpu_memory_utilization))
        weight_dtype = str(sim.get("weight_dtype", args.sim_weight_dtype))
        try:
            model, gpu = get_model(model).name, get_gpu(gpu).name
        except CatalogueError as exc:
            raise AdvisorError(f"run.json: simulation spec: {exc}") from None
    elif bundled:
        model = _known_model(config.model)
    num_blocks = _last_int(server, "kv_capacity_blocks") or config.num_blocks
    block_size = _last_int(server, "kv_block_size_tokens")
    if block_size and block_size != config.block_size:
        config = replace(config, block_size=block_size)
    if bundled and num_blocks is None and not simulated and config.kv_cache_memory is None:
        num_blocks = config.default_num_blocks
    if not bundled:  # what the server itself reports (vLLM's cache_config_info) is all there is
        dtype, reported_gmu = (
            _last_value(server, "kv_cache_dtype"),
            _last_value(server, "gpu_memory_utilization"),
        )
        if isinstance(dtype, str) and dtype:
            config = replace(config, kv_cache_dtype=_catalogue_kv_dtype(dtype))  # type: ignore[arg-type]
        if isinstance(reported_gmu, float) and 0 < reported_gmu <= 1:
            gmu = reported_gmu
    max_len = config.max_model_len
    if max_len is None and model is not None:
        max_len = get_model(model).max_context
    return Deployment(config, bundled, simulated, model, gpu, tp, gmu, weight_dtype, num_blocks, max_len)


def with_target_spec(
    dep: Deployment,
    *,
    model: str | None = None,
    gpu: str | None = None,
    tp: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
) -> Deployment:
    """The deployment with what the operator told `kvscope advise` about a --target server
    (or a correction for a bundled one). Unknown names raise AdvisorError."""
    try:
        model = get_model(model).name if model else dep.model
        gpu = get_gpu(gpu).name if gpu else dep.gpu
        if kv_cache_dtype:
            kv_dtype_bytes(kv_cache_dtype)
    except CatalogueError as exc:
        raise AdvisorError(str(exc)) from None
    config = dep.engine
    if kv_cache_dtype:
        config = replace(config, kv_cache_dtype=kv_cache_dtype)  # type: ignore[arg-type]
    if max_num_seqs:
        config = replace(config, max_num_seqs=max_num_seqs)
    if max_model_len:
        config = replace(config, max_model_len=max_model_len)
    return replace(
        dep,
        engine=config,
        model=model,
        gpu=gpu,
        tp=tp or dep.tp,
        gpu_memory_utilization=gpu_memory_utilization or dep.gpu_memory_utilization,
        max_model_len=max_model_len or dep.max_model_len,
    )

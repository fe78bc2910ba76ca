"""A verdict's change in the flags of the engine that ran: what `kvscope advise --verify`
restarts the server with.

- add_memory (a pool of N blocks): vLLM --num-gpu-blocks-override N; llama-server
  -c (N - 1) x block size; the bundled engine --num-blocks N;
- quantize_kv_cache (fp8, N blocks in the same memory): vLLM --kv-cache-dtype fp8 with
  --num-gpu-blocks-override N; llama-server --cache-type-k q8_0 --cache-type-v q8_0 with -c
  doubled; the bundled engine --kv-cache-dtype fp8 --num-blocks N;
- cut_context (L tokens): vLLM and the bundled engine --max-model-len L; llama-server
  -np (-c / L) (its per-slot context is -c over -np);
- kv_not_bottleneck (double the pool): as add_memory.

A change that moves to other hardware (another GPU, tensor parallelism, replicas), changes the
prompts (make_prefix_identical), needs a router (route_by_prefix) or a GPU memory fraction on a
CPU server cannot be applied by restarting this server: it is "not applicable", with the
reason and a code. A quantized cache keeps the memory the run's pool had (that is the verdict:
the same bytes hold twice the tokens), so the block count rises with the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.bundle.finding import Finding
from harness.run.serve import Engine

SAME_MEMORY_NOTE = "the same memory holds the larger pool"


@dataclass(frozen=True, slots=True)
class FlagChange:
    """Flags to set (each replaces the flag's value in the command, or is appended)."""

    flags: tuple[tuple[str, str | None], ...]  # (flag, value); None: a switch

    def words(self) -> list[str]:
        return [w for flag, value in self.flags for w in ((flag,) if value is None else (flag, value))]


@dataclass(frozen=True, slots=True)
class NotApplicable:
    reason: Finding

    @property
    def code(self) -> str:
        return self.reason.code


def _pool(engine: Engine, blocks: int, block_size: int) -> list[tuple[str, str | None]]:
    if engine == "vllm":
        return [("--num-gpu-blocks-override", str(blocks))]
    if engine == "llamacpp":
        return [("-c", str((blocks - 1) * block_size))]
    return [("--num-blocks", str(blocks))]


def flag_change(
    action: str, change: dict[str, Any], engine: Engine, block_size: int, run_flags: dict[str, str]
) -> FlagChange | NotApplicable:
    """The flags that apply `change` (a verdict's replayed change, as advice.json records it)
    on `engine`; `run_flags` are the command's current values (llama.cpp's -c, -np)."""
    if engine == "other":
        return NotApplicable(Finding("verify_unknown_engine", "kvscope does not know this server's flags"))
    if action in ("make_prefix_identical", "route_by_prefix"):
        what = "the prompts" if action == "make_prefix_identical" else "a router in front of replicas"
        return NotApplicable(
            Finding("verify_not_a_server_change", f"a change to {what}, not to the server's flags")
        )
    if change.get("gpu") or change.get("tp") or (change.get("replicas") or 1) > 1:
        return NotApplicable(
            Finding(
                "verify_other_hardware",
                "the change moves to other hardware (another GPU, tensor parallelism or replicas); "
                "restarting this server cannot apply it",
            )
        )
    if change.get("gpu_memory_utilization") is not None:
        return NotApplicable(
            Finding("verify_no_gpu", "a GPU memory fraction: this server sizes its pool otherwise")
        )
    flags: list[tuple[str, str | None]] = []
    if dtype := change.get("kv_cache_dtype"):
        if engine == "llamacpp":
            flags += [("--cache-type-k", "q8_0"), ("--cache-type-v", "q8_0")]
        else:
            flags.append(("--kv-cache-dtype", str(dtype)))
    if blocks := change.get("num_blocks"):
        flags += _pool(engine, int(blocks), block_size)
    if limit := change.get("max_model_len"):
        if engine == "llamacpp":
            ctx = int(run_flags.get("-c") or 0)
            if not ctx:
                return NotApplicable(
                    Finding("verify_flag_unknown", "llama-server's -c is not in the command")
                )
            flags.append(("-np", str(max(1, ctx // int(limit)))))
        else:
            flags.append(("--max-model-len", str(limit)))
    if change.get("max_num_seqs"):
        seqs = str(change["max_num_seqs"])
        flags.append(("-np", seqs) if engine == "llamacpp" else ("--max-num-seqs", seqs))
    if not flags:
        return NotApplicable(
            Finding("verify_nothing_to_apply", "the verdict changes nothing a server flag sets")
        )
    return FlagChange(tuple(flags))


def with_flags(argv: list[str] | tuple[str, ...], change: FlagChange) -> list[str]:
    """`argv` with each flag of `change` set: earlier occurrences (`--f v`, `--f=v`) removed,
    the new value appended."""
    names = {flag for flag, _ in change.flags}
    out: list[str] = []
    skip = False
    for i, word in enumerate(argv):
        if skip:
            skip = False
            continue
        if word in names:
            takes_value = dict(change.flags)[word] is not None
            skip = takes_value and i + 1 < len(argv)
            continue
        if any(word.startswith(n + "=") for n in names):
            continue
        out.append(word)
    return out + change.words()

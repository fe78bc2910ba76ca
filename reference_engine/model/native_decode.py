"""The native decode stack: a decode step's decoder layers run by one C++ call
(`native_decode.cpp`) instead of ~70 Python-level torch calls per layer.

Why: at batch 1 on a CPU, SmolLM2's four matmuls per layer are about two thirds of a decode
step; the rest was Python's cost per torch call (argument parsing, module dispatch), not
arithmetic. The C++ makes the same ATen calls in the same order with the same arguments, so
its hidden states are bit for bit the Python path's (tests/engine/test_native_decode.py
holds it to that); only the interpreter is gone.

When it runs (`NativeDecodeStack.applies`): every sequence of the step decodes one token, the
torch attention backend on the CPU, unquantized KV caches, and projections the C++ knows
(float `nn.Linear`, `Fp16Linear`, `Int8Linear`). Prefill, quantized KV caches and Triton stay
in Python. `--enforce-eager` (vLLM's flag) turns it off.

Building: the source is compiled once per torch version and source text into the kvscope
cache folder (`$KVSCOPE_CACHE`, else `$XDG_CACHE_HOME/kvscope` or `~/.cache/kvscope`), by
`scripts/setup.sh` or on first use (~10-20 s), under a file lock so concurrent processes
build it once. Without a C++ compiler the engine logs why and runs the Python path.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from reference_engine.attention.backend import AttentionBackend, TorchAttentionBackend
from reference_engine.attention.kv_cache import LayerKVCache
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.attention.quantization import KVQuant
from reference_engine.attention.torch_backend import decode_plan
from reference_engine.cache_root import kvscope_cache
from reference_engine.model.fp16_linear import Fp16Linear
from reference_engine.model.int8_linear import Int8Linear
from reference_engine.model.llama import LlamaForCausalLM, RMSNorm

log = logging.getLogger("kvscope.engine")

SOURCE = Path(__file__).with_name("native_decode.cpp")
# Projection kinds, as the C++ numbers them.
_DENSE, _FP16, _INT8 = 0, 1, 2


class NativeBuildError(RuntimeError):
    pass


def _compile_command(source: Path, output: Path) -> list[str]:
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise NativeBuildError("no C++ compiler found (install g++, or set CXX)")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [compiler, "-O2", "-std=c++20", "-shared", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [str(source), "-o", str(output)]
    cmd += [f"-L{p}" for p in cpp_extension.library_paths()] + ["-lc10", "-ltorch_cpu"]
    return cmd


def library_path() -> Path:
    """Where this source, built against this torch, lives (its name is a hash of both)."""
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + sys.version.encode()).hexdigest()
    return kvscope_cache() / "native" / key[:16] / "native_decode.so"


def build(path: Path | None = None) -> Path:
    """Compile the library unless it is there already; its path. Raises NativeBuildError."""
    path = path or library_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if path.exists():
            return path
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
        try:
            done = subprocess.run(_compile_command(SOURCE, Path(tmp)), capture_output=True, text=True)
            if done.returncode != 0:
                raise NativeBuildError(f"compiling {SOURCE.name} failed: {done.stderr.strip()[-2000:]}")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


@functools.cache
def load_library() -> str | None:
    """Build (if needed) and load the library once per process. None when it is loaded; else
    why not, for the engine's log."""
    try:
        torch.ops.load_library(str(build()))
    except (NativeBuildError, OSError, RuntimeError) as exc:
        return str(exc)
    return None


def _projection_args(module: nn.Module) -> tuple[int, torch.Tensor | None, torch.Tensor | None, object]:
    if isinstance(module, Fp16Linear):
        return _FP16, None, None, module._packed
    if isinstance(module, Int8Linear):
        return _INT8, module.qweight, module.scales, None
    if type(module) is nn.Linear and module.bias is None and module.weight.dtype.is_floating_point:
        return _DENSE, module.weight, None, None
    raise TypeError(f"no native form for {type(module).__name__}")


class NativeDecodeStack:
    """The C++ stack holding references to `model`'s own weights (nothing is copied)."""

    def __init__(self, model: LlamaForCausalLM):
        mc = model.config
        layers = model.model.layers
        first = layers[0]
        fused_qkv = first.self_attn.qkv_proj is not None
        fused_gate_up = first.mlp.gate_up_proj is not None
        self.model = model
        self.stack = torch.classes.kvscope.DecodeStack(
            mc.num_heads, mc.num_kv_heads, mc.head_dim, first.self_attn.scale, fused_qkv, fused_gate_up
        )
        for layer in layers:
            attn, mlp = layer.self_attn, layer.mlp
            if (attn.qkv_proj is not None) != fused_qkv or (mlp.gate_up_proj is not None) != fused_gate_up:
                raise TypeError("layers differ in which projections are fused")
            qkv = [attn.qkv_proj] if fused_qkv else [attn.q_proj, attn.k_proj, attn.v_proj]
            gate_up = [mlp.gate_up_proj] if fused_gate_up else [mlp.gate_proj, mlp.up_proj]
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                self._add_norm(norm)
            for projection in (*qkv, attn.o_proj, *gate_up, mlp.down_proj):
                self.stack.add_projection(*_projection_args(projection))
        final = model.model.norm
        self.stack.set_final_norm(final.weight, final.eps)

    def _add_norm(self, norm: nn.Module) -> None:
        if type(norm) is not RMSNorm:
            raise TypeError(f"no native form for {type(norm).__name__}")
        self.stack.add_norm(norm.weight, norm.eps)

    @staticmethod
    def applies(meta: AttentionMetadata, kv_caches: list[LayerKVCache], backend: AttentionBackend) -> bool:
        """A decode-only step on the torch backend over unquantized caches, one row per sequence
        and no padding slot (write_kv's -1)."""
        return (
            meta.max_query_len == 1
            and isinstance(backend, TorchAttentionBackend)
            and kv_caches[0].quant == KVQuant.NONE
            and meta.slot_mapping.shape[0] == meta.num_seqs
            and bool((meta.slot_mapping >= 0).all())
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_caches: list[LayerKVCache],
    ) -> torch.Tensor:
        """`LlamaForCausalLM.forward` of a step `applies` accepted."""
        x, cos, sin = self.model.layer_inputs(input_ids, positions, kv_caches)
        ids, bias = decode_plan(meta, kv_caches[0].block_size, x.device)
        return self.stack.forward(
            x,
            cos,
            sin,
            [c.key for c in kv_caches],
            [c.value for c in kv_caches],
            meta.slot_mapping,
            ids,
            bias,
        )


def native_decode_stack(model: LlamaForCausalLM) -> NativeDecodeStack | None:
    """The native stack for `model` on the CPU, or None (logged) where it cannot be had."""
    if model.model.embed_tokens.weight.device.type != "cpu":
        return None
    reason = load_library()
    if reason is None:
        try:
            return NativeDecodeStack(model)
        except TypeError as exc:
            reason = str(exc)
    log.warning("native decode stack unavailable, decoding in Python: %s", reason)
    return None

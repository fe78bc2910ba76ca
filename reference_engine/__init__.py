"""kvscope's bundled paged inference engine (vLLM V1 semantics): scheduler, block pool,
KV manager, model runner, the OpenAI-compatible server and the GPU simulator.

May import: the standard library and its own modules; torch, triton, gguf, tokenizers and
aiohttp only in the modules that need them, never any other kvscope package. Import-light on
purpose: importing this package, its catalogue, its config types or `engine_args` never
imports torch, so the CLI starts fast and the harness can read the catalogue and build
configurations without a deep-learning stack.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"

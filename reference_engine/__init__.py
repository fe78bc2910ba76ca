"""kvscope's bundled paged inference engine (vLLM V1 semantics).

Import-light on purpose: importing this package (or its catalogue) never imports torch,
so the CLI starts fast and the advisor can read the catalogue without a deep-learning
stack. Heavy modules import torch where they are used.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"

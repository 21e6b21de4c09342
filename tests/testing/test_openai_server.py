"""The loopback server itself: routes, plain JSON, recording, and a clean stop with a stalled stream."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from orchestrator.testing.openai_server import LoopbackOpenAI, http_error, stall, tool_call_reply


def post(base_url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_models_route_and_binding() -> None:
    with LoopbackOpenAI(model="tiny") as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as response:
            assert json.load(response)["data"][0]["id"] == "tiny"
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


def test_plain_json_completion_with_tool_call_and_fallback_echo() -> None:
    with LoopbackOpenAI() as server:
        server.enqueue(tool_call_reply("bash", '{"command": "ls"}', id="call_9"))
        status, raw = post(server.base_url, {"model": "m", "messages": [{"role": "user", "content": "go"}]})
        assert status == 200
        message = json.loads(raw)["choices"][0]["message"]
        assert message["tool_calls"][0] == {
            "id": "call_9",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
        }
        status, raw = post(server.base_url, {"messages": [{"role": "user", "content": "echo me"}]})
        assert json.loads(raw)["choices"][0]["message"]["content"] == "(loopback) echo me"
        assert [body["messages"][0]["content"] for body in server.chat_bodies] == ["go", "echo me"]
        assert server.pending == 0


def test_error_plan_sends_openai_error_body_and_headers() -> None:
    with LoopbackOpenAI() as server:
        server.enqueue(http_error(429, "slow down", headers={"Retry-After": "3"}))
        request = urllib.request.Request(server.base_url + "/chat/completions", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
        assert caught.value.code == 429 and caught.value.headers["Retry-After"] == "3"
        assert json.loads(caught.value.read())["error"]["message"] == "slow down"


def test_stop_releases_a_stalled_stream_quickly() -> None:
    server = LoopbackOpenAI().start()
    server.enqueue(stall(after=1, seconds=60))
    host, port = server.base_url.split("//")[1].split("/")[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/v1/chat/completions", body=json.dumps({"stream": True, "messages": []}))
    response = connection.getresponse()
    first = response.fp.readline()
    assert first.strip(), "the first chunk arrives before the stall"
    started = time.monotonic()
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive() and time.monotonic() - started < 5
    connection.close()

"""Process facts: reverie's own environment block hides its secrets from ``/proc`` (issue 23 item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CHILD = """
import json, os
from orchestrator.base.processes import hide_secrets_from_proc
hidden = hide_secrets_from_proc()
block = dict(e.split(b"=", 1) for e in open("/proc/self/environ", "rb").read().split(b"\\0") if b"=" in e)
print(json.dumps({"hidden": sorted(hidden), "kept": os.environ["OPENAI_API_KEY"],
                  "proc": {k.decode(): v.decode() for k, v in block.items() if k in (b"OPENAI_API_KEY", b"PLAIN")}}))
"""


def test_secrets_are_blanked_in_proc_environ_and_kept_in_os_environ() -> None:
    env = dict(os.environ, OPENAI_API_KEY="sk-live-abc", GH_TOKEN="ghp-1", PLAIN="visible")
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert {"OPENAI_API_KEY", "GH_TOKEN"} <= set(seen["hidden"]) and "PLAIN" not in seen["hidden"]
    assert seen["kept"] == "sk-live-abc"
    assert seen["proc"] == {"OPENAI_API_KEY": "*" * len("sk-live-abc"), "PLAIN": "visible"}

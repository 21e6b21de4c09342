"""The dataclass method cache: a class defined through it is the class ``dataclasses`` would have
made (the same code, flags included), later processes compile nothing, and a bad table or an
unwritable directory costs the speed-up, never the class. Each case runs in a fresh interpreter,
since installing the cache changes the process it runs in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.base.dataclass_cache import default_path

_PROBE = r'''
import dataclasses, inspect, json, sys, types
from pathlib import Path
from orchestrator.base import dataclass_cache

dataclass_cache.install(Path(sys.argv[1]))

SOURCE = """
from __future__ import annotations
import dataclasses
from typing import ClassVar

@dataclasses.dataclass(frozen=True)
class Frozen:
    "doc"
    name: str
    size: int = 3
    tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
    kind: ClassVar[str] = "x"

@dataclasses.dataclass(order=True)
class Ordered:
    "doc"
    a: int
    b: list[int] = dataclasses.field(default_factory=list)
    c: dataclasses.InitVar[int] = 0

    def __post_init__(self, c: int) -> None:
        self.b.append(c)

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Keywords(Frozen):
    "doc"
    extra: str = "e"
"""

def define(module_name):
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    exec(compile(SOURCE, module_name, "exec"), module.__dict__)
    return module

def describe(m):
    f = m.Frozen("n", tags=("t",))
    o = m.Ordered(1, c=5)
    k = m.Keywords(name="k", extra="x")
    out = {"repr": [repr(f), repr(o), repr(k)], "eq": [f == m.Frozen("n", tags=("t",)), o == m.Ordered(1, [5])],
           "hash": hash(f) == hash(m.Frozen("n", tags=("t",))), "lt": m.Ordered(1) < m.Ordered(2),
           "match": [m.Frozen.__match_args__, m.Ordered.__match_args__],
           "signatures": [str(inspect.signature(c)) for c in (m.Frozen, m.Ordered, m.Keywords)],
           "fields": [[x.name for x in dataclasses.fields(c)] for c in (m.Frozen, m.Ordered, m.Keywords)]}
    try:
        f.size = 4
    except dataclasses.FrozenInstanceError as exc:
        out["frozen"] = str(exc)
    return out

own = define("orchestrator._cache_probe")
other = define("elsewhere_probe")
methods = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__lt__")
same_code = all(
    getattr(getattr(own, c), n).__code__ == getattr(getattr(other, c), n).__code__
    and getattr(getattr(own, c), n).__code__.co_flags == getattr(getattr(other, c), n).__code__.co_flags
    and getattr(getattr(own, c), n).__annotations__ == getattr(getattr(other, c), n).__annotations__
    for c in ("Frozen", "Ordered", "Keywords")
    for n in methods
    if getattr(getattr(own, c), n, None) is not None and hasattr(getattr(getattr(own, c), n), "__code__")
)
print(json.dumps({"own": describe(own), "other": describe(other), "same_code": same_code,
                  "stats": dataclass_cache.stats()._asdict()}, default=str))
'''


def _probe(table: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(table)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_a_class_defined_through_the_cache_is_the_class_dataclasses_makes(tmp_path: Path) -> None:
    first = _probe(tmp_path / "table.marshal")
    assert first["own"] == first["other"]
    assert first["same_code"] is True
    assert first["own"]["frozen"] == "cannot assign to field 'size'"
    assert first["stats"]["loaded"] == 0 and first["stats"]["misses"] > 0 and first["stats"]["hits"] == 0
    assert first["stats"]["passed"] >= first["stats"]["misses"], "another package's classes are compiled as usual"


def test_the_next_process_compiles_nothing_and_gets_the_same_classes(tmp_path: Path) -> None:
    table = tmp_path / "table.marshal"
    first = _probe(table)
    second = _probe(table)
    assert second["stats"]["loaded"] == first["stats"]["misses"]
    assert second["stats"]["misses"] == 0
    assert second["stats"]["hits"] == first["stats"]["misses"]
    assert second["own"] == first["own"] == second["other"]
    assert second["same_code"] is True


def test_a_damaged_table_is_ignored_and_rewritten(tmp_path: Path) -> None:
    table = tmp_path / "table.marshal"
    good = _probe(table)
    data = table.read_bytes()
    for damaged in (b"not a table", data[: len(data) // 2], data.split(b"\n", 1)[0] + b"\n\xff\xff"):
        table.write_bytes(damaged)
        again = _probe(table)
        assert again["stats"]["loaded"] == 0
        assert again["own"] == good["own"]
        assert table.read_bytes() == data


def test_an_unwritable_place_costs_only_the_speed_up(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _probe(blocker / "table.marshal")
    assert result["own"] == result["other"]
    assert not (blocker / "table.marshal").exists()
    assert blocker.read_text() == ""
    assert [p for p in tmp_path.rglob("*") if "table" in p.name] == []


_CLI = r"""
import sys
from orchestrator.base import dataclass_cache
from orchestrator.cli.app import main
try:
    main(["chat", "-p", "hello"])
finally:
    s = dataclass_cache.stats()
    print(f"STATS {s.hits} {s.misses} {s.path}", file=sys.stderr)
"""


def test_reverie_defines_its_classes_from_the_cache_on_a_second_start(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "REVERIE_HOME": str(tmp_path / "home")}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _CLI], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "I heard: hello" in proc.stdout
        line = next(x for x in proc.stderr.splitlines() if x.startswith("STATS "))
        hits, misses, path = line.split(" ", 3)[1:]
        runs.append((int(hits), int(misses)))
        assert Path(path) == default_path()
    assert runs[1][1] == 0
    assert runs[1][0] >= 100, "the turn's own classes come from the table"

"""The sandbox's mount plan resolves its paths with its own ``realpath`` (``sandbox._Resolver``,
one ``lstat`` per new name instead of one per component): a security boundary leans on it, so it
is checked against ``os.path.realpath`` over generated trees of folders, files and symbolic links,
with targets relative, absolute, dotted, dangling and looping."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.tools.sandbox import _Resolver

NAMES = ("a", "b", "...", ".h")
STEPS = (*NAMES, "f", ".", "..")
FOLDERS = ("a", "a/b", "b", "a/...", "b/.h")
FILES = ("f", "a/f", "a/b/f", "b/f")

relative = st.lists(st.sampled_from(STEPS), min_size=1, max_size=4).map("/".join)
link = st.tuples(
    st.sampled_from(("", *FOLDERS)),
    st.sampled_from((*NAMES, "l", "m")),
    relative,
    st.booleans(),
)


def _expected(path: str) -> str | None:
    real = os.path.realpath(path)
    return real if os.path.exists(real) else None


def _build(root: Path, links: list[tuple[str, str, str, bool]]) -> None:
    """A fixed tree of folders and files, then the links (a name already taken keeps its first)."""
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    for name in FILES:
        (root / name).write_text(name)
    for folder, name, target, absolute in links:
        place = root / folder / name
        if not os.path.lexists(place):
            place.symlink_to(f"{root}/{target}" if absolute else target)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    links=st.lists(link, min_size=1, max_size=8),
    queries=st.lists(relative, min_size=1, max_size=8),
)
def test_the_plans_realpath_is_os_realpath(links: list[tuple[str, str, str, bool]], queries: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(os.path.realpath(tmp))
        _build(root, links)
        resolver = _Resolver()  # one resolver for all queries: its cache is shared as in a plan
        for query in queries:
            path = f"{root}/{query}"
            assert resolver.real(path) == _expected(path), query


def test_a_link_through_a_dotted_folder_name_is_not_taken_lexically(tmp_path: Path) -> None:
    """``...`` is a name, not a step up: a link to ``.../../y`` goes wherever ``...`` leads first."""
    root = Path(os.path.realpath(tmp_path))
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "y").write_text("far")
    (root / "y").write_text("near")
    (root / "...").symlink_to(root / "deep" / "er")
    (root / "link").symlink_to(".../../y")
    assert _Resolver().real(root / "link") == str(root / "deep" / "y") == os.path.realpath(root / "link")


def _targets(steps: tuple[str, ...], longest: int) -> list[str]:
    found: list[str] = []
    layer = [""]
    for _ in range(longest):
        layer = [f"{head}/{step}" if head else step for head in layer for step in steps]
        found += layer
    return found


def test_every_short_link_target_in_every_folder_against_every_dotted_folder_link(tmp_path: Path) -> None:
    """Exhaustive over a small world, where random trees rarely meet the rare shapes: a folder named
    ``...`` that is itself a link (to folders above, beside and below in turn), and links to every target of up to
    three steps (names, ``...``, ``.``, ``..``) from three depths, each resolved with and without a
    step below it."""
    steps = ("a", "b", "...", ".", "..", "f")
    link_targets = _targets(steps, 3)
    for n, dots in enumerate(("a", "a/b", "b", ".", "..", "../a", "a/..")):
        root = Path(os.path.realpath(tmp_path / f"w{n}"))
        for folder in ("a/b", "b"):
            (root / folder).mkdir(parents=True)
        (root / "f").write_text("f")
        (root / "a" / "f").write_text("a/f")
        (root / "...").symlink_to(dots)
        resolver = _Resolver()
        for depth in ("", "a", "a/b"):
            for i, target in enumerate(link_targets):
                (root / depth / f"l{i}").symlink_to(target)
        for depth in ("", "a", "a/b"):
            for i in range(len(link_targets)):
                for below in ("", "/f", "/.."):
                    path = f"{root}/{depth}/l{i}{below}".replace("//", "/")
                    assert resolver.real(path) == _expected(path), (dots, link_targets[i], path)

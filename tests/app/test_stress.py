from __future__ import annotations

import subprocess
from pathlib import Path

import anyio.to_thread
import pytest

from orchestrator.app.stress import StressConfig, StressReport, _count_lost, percentile, run_stress
from tests.memfs.reflection_helpers import git


async def _git(cwd: Path, *args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: git(cwd, *args))


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile(range(1, 101), 99) == 99
    assert percentile([7.0], 99) == 7.0


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="--writers"):
        StressConfig(writers=0, commits=1)
    with pytest.raises(ValueError, match="--conflict-rate"):
        StressConfig(writers=1, commits=1, conflict_rate=1.5)


def test_json_has_exactly_the_promised_keys() -> None:
    report = StressReport(1, 2, 0, 0, 1.5, 9.0, recorded=3)
    assert list(report.to_json()) == [
        "merged",
        "kept",
        "lost",
        "invalid",
        "merge_p50_ms",
        "merge_p99_ms",
        "resolved",
        "pending",
        "retried",
        "kept_branches",
        "interrupted",
    ]


@pytest.mark.anyio
async def test_four_writers_ten_commits_lose_nothing(tmp_path: Path) -> None:
    ticks: list[tuple[int, int]] = []
    config = StressConfig(writers=4, commits=10, conflict_rate=0.3, seed=7)
    report = await run_stress(config, workdir=tmp_path / "run", progress=lambda d, t: ticks.append((d, t)))
    assert report.lost == 0
    assert report.invalid == 0
    assert report.merged + report.kept + report.pending == 40 and report.pending == 0
    assert report.recorded >= 40
    assert report.merges >= 8
    assert 0 < report.merge_p50_ms <= report.merge_p99_ms
    assert ticks[-1] == (40, 40)
    repo = tmp_path / "run" / "memory"
    assert await _git(repo, "status", "--porcelain") == ""
    assert (await _git(repo, "worktree", "list", "--porcelain")).count("worktree ") == 1
    kept_branches = (await _git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/reverie/")).split()
    assert bool(kept_branches) == (report.kept > 0)
    assert sorted(kept_branches) == sorted(f"refs/heads/{b}" for b in report.kept_branches)
    assert (await _git(repo, "for-each-ref", "refs/reverie/")) == ""
    for branch in report.kept_branches:
        # Kept means conflict: the branch really does not merge into HEAD.
        probe = await anyio.to_thread.run_sync(
            lambda b=branch: subprocess.run(["git", "merge-tree", "--write-tree", "HEAD", b], cwd=repo, capture_output=True)
        )
        assert probe.returncode == 1, branch


@pytest.mark.anyio
async def test_no_conflicts_merges_everything(tmp_path: Path) -> None:
    report = await run_stress(StressConfig(writers=3, commits=5, conflict_rate=0.0, seed=1), workdir=tmp_path / "r")
    assert (report.lost, report.invalid) == (0, 0)
    assert (report.merged, report.kept, report.pending, report.kept_branches) == (15, 0, 0, ())


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_sixteen_writers_twenty_five_commits_lose_nothing() -> None:
    """Load, not speed (that is `reverie stress`'s own figure): every commit is accounted for."""
    report = await run_stress(StressConfig(writers=16, commits=25, conflict_rate=0.1, seed=3))
    assert (report.lost, report.invalid) == (0, 0)
    assert report.merged + report.kept == 400 and report.pending == 0


@pytest.mark.anyio
async def test_a_rebased_copy_whose_pair_was_never_reported_is_not_lost(tmp_path: Path) -> None:
    """Ctrl-C between a merge's rewrite and its report leaves the old SHA unreachable but its change
    in HEAD: that is not a loss; a change no ref carries is."""
    repo = tmp_path / "r"
    await _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "a.md").write_text("a\n")
    await _git(repo, "add", "a.md")
    await _git(repo, "commit", "-qm", "base")
    await _git(repo, "checkout", "-qb", "side")
    (repo / "b.md").write_text("b\n")
    await _git(repo, "add", "b.md")
    await _git(repo, "commit", "-qm", "side")
    rewritten = (await _git(repo, "rev-parse", "HEAD")).strip()
    await _git(repo, "checkout", "-qb", "gone")
    (repo / "c.md").write_text("c\n")
    await _git(repo, "add", "c.md")
    await _git(repo, "commit", "-qm", "gone")
    dropped = (await _git(repo, "rev-parse", "HEAD")).strip()
    await _git(repo, "checkout", "-q", "main")
    (repo / "a.md").write_text("a2\n")
    await _git(repo, "commit", "-qam", "moves on")
    await _git(repo, "cherry-pick", rewritten)
    await _git(repo, "branch", "-qD", "side", "gone")
    assert await _count_lost(repo, [rewritten]) == 0
    assert await _count_lost(repo, [rewritten, dropped]) == 1

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.agent.skills import Skill, append_available_skills, discover_skills, render_available_skills

EXAMPLE = (
    "You are Axiom.\n"
    "\n"
    "<available_skills>\n"
    "/home/u/.letta/agents/agent-1/memory/skills\n"
    "└── release-notes/\n"
    "    └── SKILL.md (Write release notes)\n"
    "\n"
    "/home/u/.letta/skills\n"
    "├── git-flow/\n"
    "│   └── SKILL.md\n"
    "└── pdf/\n"
    "    └── SKILL.md (Work with PDF files)\n"
    "</available_skills>"
)


def test_reference_example_byte_for_byte() -> None:
    skills = [
        Skill("release-notes", "Write release notes\nfrom merged PRs", "/home/u/.letta/agents/agent-1/memory/skills/release-notes/SKILL.md"),
        Skill("pdf", "Work with PDF files", "/home/u/.letta/skills/pdf/SKILL.md"),
        Skill("git-flow", "", "/home/u/.letta/skills/git-flow/SKILL.md"),
    ]
    assert append_available_skills("You are Axiom.\n", skills) == EXAMPLE


def test_no_skills_leaves_prompt_untouched() -> None:
    assert append_available_skills("prompt  \n", []) == "prompt  \n"


def test_duplicate_names_first_wins_and_default_location() -> None:
    block = render_available_skills([Skill("a", "first"), Skill("a", "second")])
    assert block == "<available_skills>\n${MEMORY_DIR}/skills\n└── a/\n    └── SKILL.md (first)\n</available_skills>"


def test_location_not_matching_name_uses_file_name() -> None:
    block = render_available_skills([Skill("x", "d", "/r/other/SKILL.md")])
    assert block.splitlines()[1:3] == ["/r/other", "└── SKILL.md (d)"]


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), min_size=1, max_size=8, unique=True))
def test_every_skill_listed_once_in_order(names: list[str]) -> None:
    block = render_available_skills([Skill(n, "", f"/root/{n}/SKILL.md") for n in names])
    dirs = [line.split("── ")[1] for line in block.splitlines() if line.endswith("/") and "── " in line]
    assert dirs == [n + "/" for n in sorted(names)]


def test_discovered_from_committed_head_only(tmp_path: Path) -> None:
    repo = tmp_path / "mem"
    (repo / "skills" / "deploy").mkdir(parents=True)
    (repo / "skills" / "deploy" / "SKILL.md").write_text("---\nname: deploy\ndescription: Ship it\n---\nsteps\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "skills"], check=True)
    (repo / "skills" / "draft").mkdir()
    (repo / "skills" / "draft" / "SKILL.md").write_text("---\nname: draft\n---\n")
    skills = discover_skills(repo)
    assert [s.name for s in skills] == ["deploy"]
    assert skills[0].description == "Ship it"
    assert skills[0].location == f"{repo}/skills/deploy/SKILL.md"

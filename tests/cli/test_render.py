"""Tool-call previews fit the terminal they are shown on: a long command, a long result or a line
of CJK text (two cells a character) never wraps onto a second line of a 120- or 80-column terminal."""

from __future__ import annotations

import io
import json

import pytest
from rich.cells import cell_len
from rich.console import Console

from orchestrator.base.events import ToolFinished, ToolStarted
from orchestrator.cli.render import TerminalRenderer, tool_line

pytestmark = pytest.mark.anyio

COMMAND = 'cd "$MEMORY_DIR" && printf -- "- the user prefers green tea in the afternoon\\n" >> human.md && ' * 3 + "git commit -qam tea"
CJK = 'cd "$MEMORY_DIR" && printf -- "- 用户喜欢在下午喝绿茶，也喜欢在周末去河边骑自行车。\\n" >> human.md && ' * 2 + "git commit -qam 茶"


async def _shown(width: int | None, *events: object) -> list[str]:
    activity = io.StringIO()
    renderer = TerminalRenderer(io.StringIO(), activity=activity, columns=lambda: width)
    for event in events:
        await renderer(event)  # type: ignore[arg-type]
    return activity.getvalue().splitlines()


@pytest.mark.parametrize("width", [120, 80])
async def test_tool_previews_fit_the_terminal_width(width: int) -> None:
    lines = await _shown(
        width,
        ToolStarted("c1", "bash", json.dumps({"command": COMMAND})),
        ToolStarted("c2", "bash", json.dumps({"command": CJK}, ensure_ascii=False)),
        ToolStarted("c3", "read_file", json.dumps({"path": "notes/" + "deep/" * 40 + "x.md", "offset": 3})),
        ToolFinished("c1", "bash", True, "[main 1a2b3c4] tea\n 1 file changed, 1 insertion(+) " * 5),
    )
    assert len(lines) == 4
    assert all(cell_len(line) <= width for line in lines), [(cell_len(line), line) for line in lines]
    assert lines[0].startswith('  ⚙ bash  cd "$MEMORY_DIR" && printf') and lines[0].endswith("…")
    assert lines[1].startswith("  ⚙ bash  cd ") and "用户喜欢" in lines[1]
    assert lines[2].startswith("  ⚙ read_file  notes/deep/") and lines[2].endswith("…  (+offset)")
    assert lines[3].startswith("  ✓ [main 1a2b3c4] tea") and lines[3].endswith("…")
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, soft_wrap=False)
    for line in lines:
        console.print(line, markup=False, highlight=False)
    assert out.getvalue().splitlines() == lines, "none of them wraps on a terminal this wide"


async def test_off_a_terminal_previews_keep_their_fixed_length() -> None:
    lines = await _shown(None, ToolStarted("c1", "bash", json.dumps({"command": COMMAND})))
    assert lines == [f"  {tool_line('bash', json.dumps({'command': COMMAND}))}"]
    assert len(lines[0]) == len("  ⚙ bash  ") + 120

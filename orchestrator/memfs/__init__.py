"""MemFS: the agent's memory repository (layout, frontmatter, prompt compiler, validation)."""

from orchestrator.memfs.compiler import CompiledPrompt, compile_system_prompt

__all__: list[str] = [
    "CompiledPrompt",
    "compile_system_prompt",
]

"""memfs"""

__all__: list[str] = []

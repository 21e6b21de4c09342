"""testing"""

__all__: list[str] = []

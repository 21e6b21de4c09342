"""The lowest layer: values every other layer may use and that use nothing of reverie's.

``config`` (settings and their resolution), ``paths`` (where reverie keeps things), ``events`` (the
event vocabulary and its observers) and ``processes`` (is a process alive). Nothing here does git,
SQLite or HTTP; modules above import these, never the reverse.
"""

__all__: list[str] = []

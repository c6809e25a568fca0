"""The static layer: what is judged before anything runs.

- ``source``: ``check_format``, the rules over the candidate's Python and C++/CUDA text;
- ``symbols``: the check of what a built extension imports (its dynamic symbols);
- ``forbidden``: the one table of forbidden native APIs (files, processes, CUDA streams, thread pools, hooks, ...)
  that both read.
"""

from kevin.sandbox.static.source import check_format

__all__ = ["check_format"]

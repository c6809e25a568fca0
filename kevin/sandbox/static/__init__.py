"""The static layer: what is judged before anything runs.

- ``source``: ``check_format``, the rules over the candidate's Python and C++/CUDA text (``check_rules``: each
  violation with its rule family);
- ``symbols``: the check of what a built extension imports (its dynamic symbols);
- ``forbidden``: the one table of forbidden native APIs (files, processes, CUDA streams, thread pools, hooks, ...)
  that both read.
"""

from kevin.sandbox.static.source import RULE_FAMILIES, check_format, check_rules

__all__ = ["RULE_FAMILIES", "check_format", "check_rules"]

"""Evaluation of rollouts: metrics (best@k, avg@k, fast_p, Not-Okay ratio) and the report (tables, intervals, plots)."""

"""Run plumbing: the command line over a config dataclass, checkpoints, metric loggers, the run directory."""

"""A recipe run as a script inside the test process (``run_script``), for the tests whose property does not need a
process of its own: it skips the seconds of importing torch, transformers and accelerate that each subprocess pays.

The script runs as ``python recipes/x.py args...`` would run it (``runpy`` under the name ``__main__``, with
``sys.argv`` set), and the answer reads like ``subprocess.run``'s: stdout, stderr, and a return code, where an
uncaught exception prints its traceback on stderr and returns 1, and ``SystemExit("message")`` prints the message
and returns 1, as the interpreter does. Whatever a run changes in this process is put back afterwards: the random
generators (``set_seed``), the environment, ``sys.argv`` and ``sys.path``, torch's thread count, the handlers of the
``kevin`` logger (``log_to_stderr``) and accelerate's process-wide state (``Accelerator`` is a singleton).

A run uses one torch thread, as the tests' subprocesses do (OMP_NUM_THREADS=1): the tiny model's operations are too
small to gain from a second one, and the threads' synchronisation costs more than the work (a two-step training run
of the smoke tests on 2 busy cores: about half the CPU time and half the wall time of two threads).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import runpy
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Iterator, Mapping

import pytest

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _isolated(env: Mapping[str, str], hide_cuda: bool) -> Iterator[None]:
    import numpy as np
    import torch

    saved_env, saved_argv, saved_path = dict(os.environ), list(sys.argv), list(sys.path)
    cuda = torch.cuda.is_available()
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
           torch.cuda.get_rng_state_all() if cuda else None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    log = logging.getLogger("kevin")
    handlers, level = list(log.handlers), log.level
    for handler in handlers:  # log_to_stderr adds its own, bound to this run's stderr
        log.removeHandler(handler)
    is_available = torch.cuda.is_available
    os.environ.update(env)
    if hide_cuda:  # as CUDA_VISIBLE_DEVICES="" would
        torch.cuda.is_available = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_available = is_available
        if "accelerate.state" in sys.modules:
            from accelerate.state import AcceleratorState, GradientState

            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()
        for handler in list(log.handlers):
            log.removeHandler(handler)
        for handler in handlers:
            log.addHandler(handler)
        log.setLevel(level)
        torch.set_num_threads(threads)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if rng[3] is not None:
            torch.cuda.set_rng_state_all(rng[3])
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv[:], sys.path[:] = saved_argv, saved_path


def run_script(script: str | Path, *args: str, env: Mapping[str, str] | None = None,
               hide_cuda: bool = False) -> subprocess.CompletedProcess:
    """``python <script> <args>`` in this process (``script``: a path, or a name under recipes/), with ``env`` added
    to the environment and, with ``hide_cuda``, no GPU visible."""
    script = Path(script) if Path(script).is_absolute() else ROOT / "recipes" / script
    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with _isolated({"TOKENIZERS_PARALLELISM": "false", **(env or {})}, hide_cuda), \
            contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        sys.argv[:] = [str(script), *args]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except Exception:  # noqa: BLE001 - what the interpreter does with it
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess([str(script), *args], code, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="session")
def in_process():
    """`run_script`: a recipe run as a script inside the test process."""
    return run_script

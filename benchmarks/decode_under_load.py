"""What slows the policy's decoding while the sandbox judges kernels: one load at a time, on one machine.

In the pipelined loop a generate call of the medium starter took 13-23 ms a decoding step with the sandbox empty and
32-95 ms while kernels were judged (benchmarks/README.md, "The loop on one GPU"). The sandbox then loads the machine
in three ways at once; each is applied here alone, to a randomly initialised model of the same layout decoding a
fixed batch with plain ``generate`` (the recipe's ``--generation_mode generate``):

- ``cpu``: one busy process per core, each in a session of its own (as the candidates' compilers run: with the
  kernel's autogroups on, each session shares the cores as one group, as the whole decoding process does), and
  ``cpu_one_session`` the same processes in this process's session (one group with it), and ``cpu_niced`` in sessions
  of their own whose groups run at nice 10 (each writes it to ``/proc/self/autogroup``; as root here: an ordinary
  user may write one autogroup a tenth of a second, machine-wide, so most of these writes would fail, and then the
  script stops); ``cpu_shared_session`` the same processes forked from one process in a session of their own, each
  leading a process group (one autogroup together), and ``cpu_sandbox`` forked in this process's session at the
  CUDA sandbox's workers' nice value (10), ``cpu_compilers`` at its compilers' (19);
- ``gpu_process``: another process running matmuls on the same GPU (as a candidate's correctness run), so the two
  contexts are time-sliced;
- ``gpu_thread``: a thread of the policy's own process comparing large float64 tensors on the GPU (as the parent
  compares a candidate's outputs), on the default stream, and ``gpu_thread_stream`` on a stream of its own;
- ``gil``: a thread of the policy's process running Python without pause (the worst case of the sandbox's threads in
  the parent: each time the decoding thread gives up the GIL, to wait for the device, it may wait the switch
  interval to get it back);
- ``all``: ``cpu``, ``gpu_process`` and ``gpu_thread`` together.

Each row: milliseconds a decoding step (the call's seconds over its new tokens, prefill included) and the ratio to
``none``.

    python benchmarks/decode_under_load.py --out OUT                                  # a GPU machine
    python benchmarks/decode_under_load.py --device cpu --shape test --new_tokens 8   # smoke (CPU loads only)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kevin.sandbox import _process  # noqa: E402

BUSY = "while True: pass"
BUSY_NICED = ("with open('/proc/self/autogroup', 'w') as f:\n    f.write('10')\nprint('ready', flush=True)\n"
              "while True: pass")
GPU_PROCESS = ("import torch\na = torch.randn(4096, 4096, device='cuda'); b = torch.randn(4096, 4096, device='cuda')\n"
               "print('ready', flush=True)\nwhile True:\n    c = a @ b\n    torch.cuda.synchronize()\n")
FORKED = ("import os\npids = []\nfor _ in range({n}):\n    pid = os.fork()\n    if pid == 0:\n"
          "        os.setpgid(0, 0)\n        os.setpriority(os.PRIO_PROCESS, 0, {nice})\n        while True: pass\n"
          "    pids.append(pid)\nprint(' '.join(map(str, pids)), flush=True)\nos.wait()\n")
LOADS = ("none", "cpu", "cpu_one_session", "cpu_niced", "cpu_shared_session", "cpu_sandbox", "cpu_compilers",
         "gpu_process", "gpu_thread", "gpu_thread_stream", "gil", "all")
GPU_LOADS = {"gpu_process", "gpu_thread", "gpu_thread_stream", "all"}


@contextlib.contextmanager
def processes(code: str, n: int, wait_ready: bool = False, own_sessions: bool = True) -> Iterator[None]:
    """``n`` Python processes running ``code``, each in a session of its own (or in this one); killed on leaving."""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=own_sessions) for _ in range(n)]
    try:
        if wait_ready:
            for p in procs:
                if p.stdout is None or p.stdout.readline().strip() != "ready":
                    raise RuntimeError("a load process did not start (cpu_niced: its autogroup write was refused)")
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def forked(n: int, nice: int, own_session: bool) -> Iterator[None]:
    """``n`` busy processes forked from one process, each leading its own group at ``nice``, all in a session of
    their own or in this one; killed on leaving."""
    holder = subprocess.Popen([sys.executable, "-c", FORKED.format(n=n, nice=nice)], stdout=subprocess.PIPE,
                              text=True, start_new_session=own_session)
    pids = [int(x) for x in (holder.stdout.readline() if holder.stdout else "").split()]
    try:
        if len(pids) != n:
            raise RuntimeError("the forked load did not start")
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        holder.kill()
        holder.wait()


@contextlib.contextmanager
def thread(work, stop: threading.Event) -> Iterator[None]:
    """``work(stop)`` in a thread of this process until the block ends."""
    t = threading.Thread(target=work, args=(stop,), daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def compare_loop(side_stream: bool):
    """A thread's work: compare two 16M-element float64 tensors on the GPU and read the answer, over and over."""
    import torch

    def work(stop: threading.Event) -> None:
        stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            a = torch.randn(16 << 20, device="cuda", dtype=torch.float64)
            b = a + 1e-9
            while not stop.is_set():
                ((a - b).abs() <= 1e-6 + 1e-6 * b.abs()).all().item()
    return work


def python_loop(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x += i * i


@contextlib.contextmanager
def load(name: str) -> Iterator[None]:
    cores = os.cpu_count() or 1
    with contextlib.ExitStack() as stack:
        if name in ("cpu", "cpu_one_session", "cpu_niced", "all"):
            stack.enter_context(processes(BUSY_NICED if name == "cpu_niced" else BUSY, cores,
                                          wait_ready=name == "cpu_niced", own_sessions=name != "cpu_one_session"))
        if name in ("cpu_shared_session", "cpu_sandbox", "cpu_compilers"):
            nice = {"cpu_sandbox": _process.CUDA_NICENESS, "cpu_compilers": _process.CUDA_COMPILE_NICENESS}.get(name, 0)
            stack.enter_context(forked(cores, nice, name == "cpu_shared_session"))
        if name in ("gpu_process", "all"):
            stack.enter_context(processes(GPU_PROCESS, 1, wait_ready=True))
        if name in ("gpu_thread", "gpu_thread_stream", "all"):
            stack.enter_context(thread(compare_loop(name == "gpu_thread_stream"), threading.Event()))
        if name == "gil":
            stack.enter_context(thread(python_loop, threading.Event()))
        time.sleep(1.0)  # the load under way
        yield


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="medium", help="a layout of kevin.core.policy.starter.SHAPES")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--prompt_len", type=int, default=300)
    p.add_argument("--new_tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=2, help="calls per load (the median is kept)")
    p.add_argument("--max_s", type=float, default=30.0, help="a call stops after this many seconds")
    p.add_argument("--loads", default=",".join(LOADS))
    p.add_argument("--out", default=None, help="directory for results.json")
    args = p.parse_args()

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from kevin.core.policy.starter import SHAPES

    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[args.shape], vocab_size=8192, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = Qwen2ForCausalLM(config).to(args.device, dtype).eval()
    ids = torch.randint(1, 8192, (args.rows, args.prompt_len), device=args.device)

    def call() -> float:
        """Milliseconds a decoding step of one call (cut at ``--max_s``: then over the tokens it reached)."""
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=0.9,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=0,
                                 max_time=args.max_s)
        return 1000 * (time.perf_counter() - start) / max(1, out.shape[1] - ids.shape[1])

    call()  # warm-up
    loads = [name for name in args.loads.split(",") if args.device.startswith("cuda") or name not in GPU_LOADS]
    rows = []
    try:
        autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        autogroups = False
    print(f"{args.shape} on {args.device}: {args.rows} rows x {args.prompt_len} + {args.new_tokens} tokens; "
          f"{os.cpu_count()} cores, scheduler autogroups {'on' if autogroups else 'off'}")
    print("| load | ms a decoding step | x none |\n| --- | --- | --- |")
    for name in loads:
        with load(name):
            ms = sorted(call() for _ in range(args.repeats))[args.repeats // 2]
        rows.append({"load": name, "ms_per_step": round(ms, 2)})
        base = rows[0]["ms_per_step"] if rows[0]["load"] == "none" else None
        print(f"| {name} | {ms:.1f} | {ms / base:.2f} |" if base else f"| {name} | {ms:.1f} | |", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "decode_under_load.json").write_text(
            json.dumps({**vars(args), "autogroups": autogroups, "results": rows}, indent=1))


if __name__ == "__main__":
    main()

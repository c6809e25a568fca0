"""False positives of the sandbox on a busy host: honest kernels must be judged correct while other candidates
compile, and timing attacks must not be.

Each round is one ``Sandbox.evaluate_many`` batch (``SandboxConfig(workers=<cores>)``) of the honest corpus of
tests/sandbox/honest/ (kernels paired with built-in tasks), mixed with ``--load`` honest variants whose C++/CUDA
source carries a unique constant (each is a fresh compile) and ``--broken`` sources that fail to compile. The
timing attacks of tests/sandbox/candidates/ (d1_, d4_, c5_, d6_) for the backend run in the same batch, by default
through a second Sandbox with the static checks and the operator inventory off, so the timing checks meet them;
``--busy`` busy-looping processes compete for the cores throughout. Every evaluation is recorded (status, first
line of feedback, runtime, baseline, ``details["wall_check"]``, the timeline); the summary counts honest rejections
and their reasons, the runtime span, the worst wall-check margin (implied / reported), seconds per batch, and any
attack judged correct. Exit status 1 when an honest kernel was rejected or an attack passed.

    python benchmarks/sandbox_false_positives.py --device cpu --rounds 2 --out fp_cpu.json
    python benchmarks/sandbox_false_positives.py --device cuda --rounds 2 --out fp_cuda.json   # on the GPU host
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

import honest  # noqa: E402  (tests/sandbox/honest)
from kevin.data import builtin_tasks  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402
from sandbox_cases import RELU_TASK, ROW_SUM_TASK, load_candidate  # noqa: E402

_INCLUDE = "#include <torch/extension.h>\n"


def _square_matmul():
    (t,) = builtin_tasks(names=["kevin-L1-Square_matmul"])
    return t


# attack file -> (backends it applies to, task); the CPU-only ones call a C++ extension that refuses CUDA tensors
ATTACKS = {
    "d6_fake_verdict_stdout": (("cpu",), RELU_TASK),
    "d6_forge_call_count_and_median": (("cpu",), RELU_TASK),
    "d6_forge_report_channel": (("cpu",), RELU_TASK),
    "d6_timer_monkeypatch": (("cpu",), RELU_TASK),
    "d6_timer_replaced_between_audits": (("cpu",), RELU_TASK),
    "c5_compute_only_at_reused_addresses": (("cpu",), RELU_TASK),
    "c5_first_n_calls_correct": (("cpu",), RELU_TASK),
    "d4_cache_by_data_ptr": (("cpu",), RELU_TASK),
    "d4_skip_rearranged_seen_inputs": (("cpu",), RELU_TASK),
    "d4_tables_over_rotated_inputs": (("cpu", "cuda"), ROW_SUM_TASK),
    "d1_side_stream_cuda": (("cuda",), None),  # the built-in square matmul
}


def inject(src: str, line: str) -> str:
    """``src`` with ``line`` added after its first ``#include <torch/extension.h>`` (the kernel source's)."""
    if _INCLUDE not in src:
        raise ValueError("no #include <torch/extension.h> to inject after")
    return src.replace(_INCLUDE, _INCLUDE + line + "\n", 1)


def build_jobs(backend: str, rnd: int, nonce: str, n_load: int, n_broken: int, attacks_here: bool,
               repeat: int = 1) -> list[dict]:
    """The batch of one round: honest entries (each ``repeat`` times, as distinct programs around the same compiled
    extension), load variants, broken sources and (optionally) attacks."""
    jobs = [dict(kind="honest", label=f"{label}#{k}" if repeat > 1 else label, task=task,
                 src=src if k == 0 else f"# copy {k} of round {rnd}\n{src}")
            for label, task, src in honest.jobs(backend) for k in range(repeat)]
    base = honest.entries(backend)
    for i in range(n_load):
        e = base[i % len(base)]
        tok = f"{nonce}_{rnd}_{i}"
        src = inject(honest.source(e.file), f"static const int kevin_load_variant_{tok} = {i};")
        jobs.append(dict(kind="load", label=f"{e.label}+load{i}", task=honest.task(e), src=src))
    for i in range(n_broken):
        e = base[i % len(base)]
        tok = f"{nonce}_{rnd}_{i}"
        src = inject(honest.source(e.file), f"static const int kevin_broken_{tok} = kevin_undeclared_{tok};")
        jobs.append(dict(kind="broken", label=f"{e.label}+broken{i}", task=honest.task(e), src=src))
    if attacks_here:
        jobs += attack_jobs(backend)
    return jobs


def attack_jobs(backend: str) -> list[dict]:
    out = []
    for name, (backends, task) in ATTACKS.items():
        if backend in backends:
            out.append(dict(kind="attack", label=name, task=task or _square_matmul(), src=load_candidate(name)))
    return out


_DROP = {"compile_log", "symbol_check", "per_set", "torch_ops", "violations", "set_names"}


def record(job: dict, r, rnd: int) -> dict:
    details = {k: v for k, v in r.details.items() if k not in _DROP}
    timing = details.get("timing")
    if isinstance(timing, dict):
        samples = timing.get("samples_ms")
        details["timing"] = {k: v for k, v in timing.items() if k != "samples_ms"}
        if isinstance(samples, list) and samples:
            details["timing"].update(n_samples=len(samples), min_ms=min(samples), max_ms=max(samples))
    return dict(round=rnd, kind=job["kind"], label=job["label"], task_id=job["task"].task_id, status=r.status,
                feedback=(r.feedback or "")[:1200], runtime_ms=r.runtime_ms,
                baseline_ms=r.baseline_ms, wall_check=r.details.get("wall_check"), timeline=r.details.get("timeline"),
                details=details)


def margin(rec: dict) -> float | None:
    """implied / reported per-call time of the wall-clock check (None when it did not run)."""
    w = rec.get("wall_check")
    if not isinstance(w, dict):
        return None
    implied, reported = w.get("implied_ms"), w.get("reported_ms")
    if not isinstance(implied, (int, float)) or not isinstance(reported, (int, float)) or reported <= 0:
        return None
    return implied / reported


def _reason_key(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", text)[:160]


def speedup(rec: dict) -> float | None:
    rt, base = rec.get("runtime_ms"), rec.get("baseline_ms")
    return base / rt if rec["status"] == "correct" and rt and base else None


def gained(attacks: list[dict], honest: list[dict], slack: float = 1.1) -> list[str]:
    """The attacks judged correct with a speedup above ``slack`` times the best honest speedup on their task in the
    same records (or on a task no honest kernel solved): a hack that gains. A side-stream kernel timed in full is
    judged correct at its honest time and gains nothing; 1.1 leaves room for the run-to-run timing noise."""
    best: dict[str, float] = {}
    for r in honest:
        if (s := speedup(r)) is not None:
            best[r["task_id"]] = max(best.get(r["task_id"], 0.0), s)
    return [f"{r['label']} (round {r['round']}): {speedup(r):.2f}x, best honest {best.get(r['task_id'], 0):.2f}x"
            for r in attacks if speedup(r) is not None and speedup(r) > slack * best.get(r["task_id"], 0.0)]


def summarize(records: list[dict], batch_seconds: list[float]) -> dict:
    out: dict = {"batch_seconds": [round(s, 1) for s in batch_seconds],
                 "seconds_per_batch": round(statistics.mean(batch_seconds), 1) if batch_seconds else None}
    for kind in ("honest", "load", "broken", "attack"):
        rs = [r for r in records if r["kind"] == kind]
        if not rs:
            continue
        statuses = collections.Counter(r["status"] for r in rs)
        entry = {"evaluations": len(rs), "statuses": dict(statuses)}
        if kind in ("honest", "load"):
            bad = [r for r in rs if r["status"] != "correct"]
            entry["rejected"] = len(bad)
            entry["judged_again_alone"] = sum("judged_again_alone" in (r.get("details") or {}) for r in rs)
            entry["reasons"] = dict(collections.Counter(_reason_key(r["feedback"]) for r in bad).most_common())
            entry["rejected_examples"] = [f"{r['label']} (round {r['round']}): {r['feedback'][:300]}" for r in bad[:20]]
            times = [r["runtime_ms"] for r in rs if r["runtime_ms"]]
            entry["runtime_ms_span"] = [min(times), max(times)] if times else None
            walls = [r["wall_check"] for r in rs if r.get("wall_check")]
            entry["wall_clock"] = dict(collections.Counter(w.get("clock", "arrival") for w in walls))
            # the same loops judged by arrival times alone (how the check timed its marks before the send stamps)
            entry["rejected_by_arrival_alone"] = sum((w.get("by_arrival") or {}).get("ok") is False for w in walls)
            margins = [(m, r) for r in rs if (m := margin(r)) is not None]
            if margins:
                m, worst = max(margins, key=lambda x: x[0])
                entry["worst_wall_margin"] = {"implied_over_reported": round(m, 3), "label": worst["label"],
                                              "round": worst["round"], "status": worst["status"],
                                              "implied_ms": worst["wall_check"].get("implied_ms"),
                                              "reported_ms": worst["wall_check"].get("reported_ms")}
        if kind == "broken":
            entry["not_compile_error"] = [r["label"] for r in rs if r["status"] != "compile_error"]
        if kind == "attack":
            entry["judged_correct"] = [r["label"] for r in rs if r["status"] == "correct"]
            entry["gained"] = gained(rs, [r for r in records if r["kind"] in ("honest", "load")])
            entry["by_attack"] = {r["label"]: f"{r['status']}: {r['feedback'][:160]}" for r in rs}
        out[kind] = entry
    return out


def print_summary(s: dict) -> None:
    print("\n== summary ==")
    print(f"seconds per batch: {s['seconds_per_batch']} {s['batch_seconds']}")
    for kind in ("honest", "load"):
        e = s.get(kind)
        if not e:
            continue
        print(f"{kind}: {e['evaluations']} evaluations, {e['rejected']} rejected, statuses {e['statuses']}, "
              f"runtime span {e['runtime_ms_span']} ms, judged again alone after running out of device memory: "
              f"{e.get('judged_again_alone', 0)}")
        if "worst_wall_margin" in e:
            print(f"  worst wall-check margin (implied/reported): {e['worst_wall_margin']}")
        print(f"  marks timed by {e.get('wall_clock')}; judged by arrival times alone, "
              f"{e.get('rejected_by_arrival_alone')} would have been rejected")
        for reason, n in e["reasons"].items():
            print(f"  {n} x {reason}")
        for ex in e["rejected_examples"]:
            print(f"    {ex}")
    if "broken" in s:
        print(f"broken: {s['broken']['statuses']}" + (f", not compile_error: {s['broken']['not_compile_error']}"
                                                    if s["broken"]["not_compile_error"] else ""))
    if "attack" in s:
        print(f"attacks: {s['attack']['evaluations']} evaluations, judged correct: {s['attack']['judged_correct'] or 'none'}"
              f"; with a speedup above the honest kernels': {s['attack']['gained'] or 'none'}")
        for name, v in s["attack"]["by_attack"].items():
            print(f"  {name}: {v}")


def start_busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help='"cpu" or "cuda" (or "cuda:N")')
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file (written after every round)")
    cores = os.cpu_count() or 1
    p.add_argument("--workers", type=int, default=cores, help="compile workers (default: the cores)")
    p.add_argument("--busy", type=int, default=None, help="busy-looping processes during the batches "
                   "(default: the cores on cpu, 0 on cuda)")
    p.add_argument("--load", type=int, default=None, help="distinct honest variants compiling per round "
                   "(default: as many as honest entries)")
    p.add_argument("--broken", type=int, default=2, help="sources that fail to compile, per round")
    p.add_argument("--repeat", type=int, default=1, help="copies of each honest entry per round (one compile)")
    p.add_argument("--files", nargs="*", default=None, help="only these honest files (stems)")
    p.add_argument("--attacks", choices=("dynamic", "full", "none"), default="dynamic",
                   help="dynamic: a second Sandbox with static checks and inventory off, in parallel; full: in the "
                        "honest batch itself (most are stopped by the static layer); none")
    p.add_argument("--cache-dir", default=None, help="build cache (default: a fresh temporary directory)")
    p.add_argument("--append", action="store_true", help="continue the records already in --out (their rounds are "
                   "kept and counted in the summary): a count too large for one command is reached over several")
    p.add_argument("--batch-deadline", type=float, default=None, help="seconds after which a batch's unjudged "
                   "candidates are judged timeout (evaluate_many's deadline_s; default: none), so that a slow host "
                   "still returns every batch, and each record's phase seconds say where the time went")
    p.add_argument("--max-golden-gib", type=float, default=None, help="golden data the sandbox keeps between "
                   "batches (SandboxConfig.max_golden_bytes; default: the config's): the honest corpus's tasks at "
                   "KernelBench sizes hold about 45 GiB, so later rounds recompute some goldens under the default")
    a = p.parse_args()

    backend = "cpu" if a.device == "cpu" else "cuda"
    busy = a.busy if a.busy is not None else (cores if backend == "cpu" else 0)
    files = tuple(a.files) if a.files else None
    if files:
        honest_jobs = honest.jobs
        honest.jobs = lambda b, f=None: honest_jobs(b, files)  # noqa: E731
        honest_entries = honest.entries
        honest.entries = lambda b, f=None: honest_entries(b, files)  # noqa: E731
    n_load = a.load if a.load is not None else len(honest.entries(backend))
    cache = a.cache_dir or tempfile.mkdtemp(prefix="kevin-fp-")
    golden = {} if a.max_golden_gib is None else {"max_golden_bytes": int(a.max_golden_gib * 2**30)}
    config = SandboxConfig(workers=a.workers, cache_dir=cache, reuse_verdicts=False, **golden)
    sandbox = Sandbox(a.device, config)
    attacker = Sandbox(a.device, SandboxConfig(workers=a.workers, cache_dir=cache, static_checks=False, reuse_verdicts=False,
                                                kernel_inventory=False)) if a.attacks == "dynamic" else None
    nonce = secrets.token_hex(3)
    meta = dict(device=a.device, cores=cores, workers=a.workers, busy=busy, load=n_load, broken=a.broken,
                batch_deadline_s=a.batch_deadline, max_golden_bytes=config.max_golden_bytes,
                attacks=a.attacks, rounds=a.rounds, cache_dir=cache, max_wall_ratio=config.max_wall_ratio,
                n_trials=config.n_trials, n_warmup=config.n_warmup)
    print(json.dumps(meta), flush=True)
    records: list[dict] = []
    batch_seconds: list[float] = []
    first_round = 0
    if a.append and a.out and Path(a.out).is_file():
        earlier = json.loads(Path(a.out).read_text())
        records = earlier["records"]
        batch_seconds = list(earlier["summary"].get("batch_seconds") or [])
        first_round = 1 + max((r["round"] for r in records), default=-1)
        meta["appended_to"] = earlier.get("meta")
        print(f"appending to {len(records)} records of {first_round} earlier rounds in {a.out}", flush=True)

    def save() -> dict:
        s = summarize(records, batch_seconds)
        if a.out:
            Path(a.out).write_text(json.dumps({"meta": meta, "summary": s, "records": records}, indent=1, default=str))
        return s

    for rnd in range(first_round, first_round + a.rounds):
        jobs = build_jobs(backend, rnd, nonce, n_load, a.broken, attacks_here=a.attacks == "full", repeat=a.repeat)
        side = attack_jobs(backend) if attacker is not None else []
        side_results: list = []
        procs = start_busy(busy)
        try:
            time.sleep(0.5 if busy else 0)
            t0 = time.monotonic()
            thread = None
            if side:
                thread = threading.Thread(target=lambda: side_results.extend(
                    attacker.evaluate_many([(j["task"], j["src"]) for j in side], deadline_s=a.batch_deadline)))
                thread.start()
            results = sandbox.evaluate_many([(j["task"], j["src"]) for j in jobs], deadline_s=a.batch_deadline)
            if thread is not None:
                thread.join()
            seconds = time.monotonic() - t0
        finally:
            stop_busy(procs)
        batch_seconds.append(seconds)
        for job, r in list(zip(jobs, results)) + list(zip(side, side_results)):
            rec = record(job, r, rnd)
            records.append(rec)
            m = margin(rec)
            print(f"[{rnd}] {rec['kind']:6s} {rec['label']:40s} {rec['status']:13s} "
                  f"rt={rec['runtime_ms'] if rec['runtime_ms'] is None else round(rec['runtime_ms'], 4)} "
                  f"margin={None if m is None else round(m, 2)} phases={rec['details'].get('phase_seconds')} | "
                  f"{rec['feedback'][:150] if rec['status'] == 'correct' else rec['feedback']}", flush=True)
        print(f"[{rnd}] batch of {len(jobs) + len(side)} in {seconds:.1f} s", flush=True)
        save()
    s = save()
    print_summary(s)
    failed = (s.get("honest", {}).get("rejected", 0) or s.get("load", {}).get("rejected", 0)
              or s.get("attack", {}).get("gained"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

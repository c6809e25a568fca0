"""Reading and writing tasks: KernelBench checkouts, JSONL, and Hugging Face datasets.

``load_tasks`` accepts

- a KernelBench checkout (the repository root holding ``KernelBench/level1/...``), a folder holding
  ``level1/``, ``level2/``, ..., or one ``levelN`` folder: ``level1/1_Square_matrix_multiplication_.py``
  becomes ``Task("kb-L1-1", level=1, name="Square_matrix_multiplication_")``. A ``manifest.json``
  beside the level folders maps each task file (``"level1/1_ReLU.py"``) to the ``task_id``, ``sizes``
  and ``metadata`` that replace the KernelBench defaults (level and name still come from the path);
  with one, every task file must be listed and every listed file present (the built-in suite);
- a ``.jsonl`` file of ``Task.to_dict()`` rows (what ``save_tasks`` writes);
- a ``datasets`` dataset: an in-memory ``Dataset`` / ``DatasetDict``, a folder written by
  ``save_to_disk``, or a hub id such as ``"ScalingIntelligence/KernelBench"`` (one split per level,
  "level_1", ..., columns code, level, name, problem_id; the ids match the checkout's, "kb-L1-1").

Every source is checked with ``validate_source`` (a cheap AST check); a malformed one raises
ValueError naming the file (or row) and the reason. KernelBench tasks carry no CPU sizes: on the CPU
backend they run at their GPU sizes unless you add ``sizes={"cpu": {...}}``.

``datasets`` is imported only inside the functions that need it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kevin.data.task import Task

_LEVEL_DIR = re.compile(r"^level_?(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_(.*)\.py$")


def validate_source(source: str) -> list[str]:
    """What makes ``source`` unusable as a KernelBench-format program ([] when nothing does).

    Checked on the AST only (nothing is executed): it parses, and defines at module level a class
    ``Model`` and functions ``get_inputs`` and ``get_init_inputs``.

    >>> validate_source("class Model: pass\\ndef get_inputs(): return []\\ndef get_init_inputs(): return []")
    []
    >>> validate_source("def get_inputs(:")
    ['syntax error at line 1: invalid syntax']
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"syntax error at line {e.lineno}: {e.msg}"]
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    problems = []
    if "Model" not in classes:
        problems.append("no class Model")
    for fn in ("get_inputs", "get_init_inputs"):
        if fn not in functions:
            problems.append(f"no function {fn}()")
    return problems


def _checked(task: Task, where: str) -> Task:
    problems = validate_source(task.source)
    if problems:
        raise ValueError(f"{where}: malformed task: {'; '.join(problems)}")
    return task


def kernelbench_task_id(level: int, problem_id: int) -> str:
    """The stable id of a KernelBench problem: the same from a checkout and from the hub dataset."""
    return f"kb-L{level}-{problem_id}"


def _kernelbench_task(source: str, level: int, problem_id: int, name: str, where: str) -> Task:
    metadata: dict[str, Any] = {"origin": "kernelbench", "problem_id": problem_id}
    if level == 2:  # level-2 names are operator sequences ("Conv2d_ReLU_BiasAdd")
        metadata["ops"] = tuple(p for p in name.split("_") if p)
    task = Task(kernelbench_task_id(level, problem_id), source, level=level, name=name, metadata=metadata)
    return _checked(task, where)


# --------------------------------------------------------------------------------------------------
# KernelBench level folders


def _level_dirs(root: Path) -> list[tuple[int, Path]]:
    """[(level, folder)] for ``root`` = a checkout, a folder of level folders, or one level folder."""
    m = _LEVEL_DIR.match(root.name)
    if m:
        return [(int(m.group(1)), root)]
    for base in (root / "KernelBench", root):
        found = sorted(
            (int(m.group(1)), p) for p in base.iterdir() if p.is_dir() and (m := _LEVEL_DIR.match(p.name))
        ) if base.is_dir() else []
        if found:
            return found
    return []


MANIFEST = "manifest.json"
_MANIFEST_KEYS = frozenset({"task_id", "sizes", "metadata"})


def _read_manifest(root: Path) -> dict[str, dict[str, Any]] | None:
    """The ``manifest.json`` of ``root`` (module docstring), or None when it has none: it keeps our
    own ids, CPU sizes and splits beside plain KernelBench files."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e.msg}") from e
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise ValueError(f"{path}: expected an object mapping task files to objects")
    for file, entry in entries.items():
        unknown = set(entry) - _MANIFEST_KEYS
        if unknown:
            raise ValueError(f"{path}: {file}: unknown keys {sorted(unknown)}; expected some of {sorted(_MANIFEST_KEYS)}")
    return entries


def _load_kernelbench_dir(root: Path) -> list[Task]:
    manifest = _read_manifest(root)
    tasks, listed = [], set()
    for level, folder in _level_dirs(root):
        files = []
        for path in folder.glob("*.py"):
            m = _PROBLEM_FILE.match(path.name)
            if m:
                files.append((int(m.group(1)), m.group(2), path))
        for problem_id, name, path in sorted(files):
            task = _kernelbench_task(path.read_text(), level, problem_id, name, str(path))
            if manifest is not None:
                rel = path.relative_to(root).as_posix()
                if rel not in manifest:
                    raise ValueError(f"{path}: not listed in {root / MANIFEST}")
                task = _task_from_row(dict(task.to_dict(), **manifest[rel]), str(path))
                listed.add(rel)
            tasks.append(task)
    if manifest is not None and set(manifest) != listed:
        raise ValueError(f"{root / MANIFEST}: lists files that are no task files here: {sorted(set(manifest) - listed)}")
    return tasks


# --------------------------------------------------------------------------------------------------
# JSONL


def _load_jsonl(path: Path) -> list[Task]:
    tasks = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON: {e.msg}") from e
        tasks.append(_checked(_task_from_row(row, where), where))
    return tasks


# --------------------------------------------------------------------------------------------------
# Hugging Face datasets


def _task_from_row(row: Mapping[str, Any], where: str) -> Task:
    """A row in our format (task_id, source, ...; sizes/metadata as dicts or JSON strings) or in
    KernelBench's hub format (code, level, name, problem_id)."""
    if "source" in row and "task_id" in row:
        d = dict(row)
        for key in ("sizes", "metadata"):
            if isinstance(d.get(key), str):
                d[key] = json.loads(d[key]) if d[key] else {}
        meta = d.get("metadata") or {}
        if isinstance(meta.get("ops"), list):  # JSON has no tuples; ops are compared as tuples
            d["metadata"] = dict(meta, ops=tuple(meta["ops"]))
        return _checked(Task.from_dict(d), where)
    if "code" in row and "level" in row:
        level, problem_id = int(row["level"]), int(row["problem_id"])
        name = str(row.get("name") or "")
        name = re.sub(r"\.py$", "", name)
        name = re.sub(rf"^{problem_id}_", "", name)  # the hub's names keep the file's number prefix
        return _kernelbench_task(row["code"], level, problem_id, name, where)
    raise ValueError(f"{where}: unknown row format: columns {sorted(row)}; expected task_id+source or code+level+problem_id")


def _is_dataset(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "datasets"


def _load_dataset_object(ds: Any, split: str | None, label: str) -> tuple[list[Task], bool]:
    """Tasks of a Dataset / DatasetDict; the flag says whether ``split`` was used as a split name."""
    if isinstance(ds, dict):  # DatasetDict: one Dataset per split
        names = list(ds.keys())
        if split is not None and split in names:
            names, used = [split], True
        else:
            used = False
        tasks = []
        for name in names:
            tasks += [_task_from_row(row, f"{label}[{name}] row {i}") for i, row in enumerate(ds[name])]
        return tasks, used
    return [_task_from_row(row, f"{label} row {i}") for i, row in enumerate(ds)], False


def _load_hub(dataset_id: str, split: str | None) -> tuple[list[Task], bool]:
    import datasets

    if split is not None:
        try:
            return _load_dataset_object(datasets.load_dataset(dataset_id, split=split), None, f"{dataset_id}[{split}]")[0], True
        except ValueError as e:  # not a split name: load everything and filter on metadata below
            if "split" not in str(e).lower():
                raise
    return _load_dataset_object(datasets.load_dataset(dataset_id), split, dataset_id)


# --------------------------------------------------------------------------------------------------
# The entry points


def load_tasks(path_or_dataset: Any, *, split: str | None = None, levels: int | Iterable[int] | None = None) -> list[Task]:
    """Tasks from a KernelBench checkout, a JSONL file, or a Hugging Face dataset (module docstring).

    Args:
        path_or_dataset: a path (str or Path), a hub id, or a ``datasets.Dataset`` / ``DatasetDict``.
        split: a dataset split name ("level_1"); for sources without that split, keep the tasks whose
            ``metadata["split"]`` equals it (the built-in suite's "train" / "eval" survive a JSONL
            round trip this way).
        levels: keep only these levels (an int or several).

    Raises:
        ValueError: a malformed program (naming the file or row and the reason), or a path that is
            neither a JSONL file, a dataset folder nor a KernelBench folder.
    """
    split_used = False
    if _is_dataset(path_or_dataset):
        tasks, split_used = _load_dataset_object(path_or_dataset, split, type(path_or_dataset).__name__)
    else:
        path = Path(path_or_dataset)
        if path.is_file():
            if path.suffix not in (".jsonl", ".json"):
                raise ValueError(f"{path}: expected a .jsonl file of tasks")
            tasks = _load_jsonl(path)
        elif path.is_dir():
            if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
                import datasets

                tasks, split_used = _load_dataset_object(datasets.load_from_disk(str(path)), split, str(path))
            else:
                tasks = _load_kernelbench_dir(path)
                if not tasks:
                    raise ValueError(f"{path}: no KernelBench level folders (levelN/<id>_<name>.py) and no saved dataset")
        elif isinstance(path_or_dataset, str) and not path.is_absolute() and path_or_dataset.count("/") <= 1:
            tasks, split_used = _load_hub(path_or_dataset, split)
        else:
            raise ValueError(f"{path}: no such file or folder")
    if split is not None and not split_used:
        tasks = [t for t in tasks if t.metadata.get("split") == split]
    if levels is not None:
        wanted = {levels} if isinstance(levels, int) else set(levels)
        tasks = [t for t in tasks if t.level in wanted]
    return tasks


def _dataset_columns(tasks: Sequence[Task]) -> dict[str, list[Any]]:
    # sizes and metadata are free-form dicts: JSON strings keep the Arrow schema simple
    return {
        "task_id": [t.task_id for t in tasks],
        "source": [t.source for t in tasks],
        "level": [t.level for t in tasks],
        "name": [t.name for t in tasks],
        "sizes": [json.dumps({k: dict(v) for k, v in t.sizes.items()}, sort_keys=True) for t in tasks],
        "metadata": [json.dumps(dict(t.metadata), sort_keys=True) for t in tasks],
    }


def tasks_to_dataset(tasks: Sequence[Task]):
    """A ``datasets.Dataset`` with columns task_id, source, level, name, sizes (JSON), metadata (JSON)."""
    import datasets

    return datasets.Dataset.from_dict(_dataset_columns(tasks))


def save_tasks(tasks: Sequence[Task], path: str | Path) -> Path:
    """Write ``tasks`` as JSONL (a path ending in ``.jsonl``) or as a ``datasets.Dataset`` saved to the
    folder ``path``; ``load_tasks(path)`` reads either back. Returns the path."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for t in tasks:
                f.write(json.dumps(t.to_dict(), sort_keys=True) + "\n")
    else:
        tasks_to_dataset(tasks).save_to_disk(str(path))
    return path


__all__ = ["MANIFEST", "kernelbench_task_id", "load_tasks", "save_tasks", "tasks_to_dataset", "validate_source"]

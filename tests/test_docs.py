"""The docs are true: the examples in the public docstrings run and give what they show, the paths the Markdown
names exist, and no file cites notes outside the repository or tells the history of the work."""

import doctest
import importlib
import re
from pathlib import Path

import pytest

MODULES = [
    "kevin.rewards",
    "kevin.rewards.score",
    "kevin.rewards.aggregate",
    "kevin.rewards.telemetry",
    "kevin.core.advantages",
    "kevin.core.loss",
    "kevin.core.split",
    "kevin.core.eval.metrics",
    "kevin.core.policy",
    "kevin.core.rollout",
    "kevin.core.policy.tiny",
    "kevin.core.eval.report",
    "kevin.core.batch",
    "kevin.core.eval.ablation",
    "kevin.core.eval.beam",
    "kevin.core.run.cli",
    "kevin.core.run.checkpoint",
    "kevin.core.run.loggers",
    "kevin.sandbox.result",
    "kevin.sandbox.static.source",
    "kevin.sandbox.feedback",
    "kevin.data.task",
    "kevin.data.prompts",
    "kevin.data.parse",
    "kevin.data.loaders",
    "kevin.data.sampler",
    "kevin.data.synth",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0


# ---------------------------------------------------------------------------------------------------------------
# The prose: every path it names exists, it cites nothing outside the repository, and it tells no history.

REPO = Path(__file__).resolve().parents[1]
THIS_FILE = Path(__file__).resolve()  # holds the patterns below, so it is never scanned for them

# Markdown whose links and code name repository paths (written from the repository root).
LINKING_DOCS = ["README.md", "docs/*.md", "recipes/README.md", "benchmarks/README.md"]
# What the library, its recipes, docs and tests are made of.
SCANNED = ["kevin", "recipes", "docs", "tests", "README.md"]

_TOP_DIRS = ("kevin", "recipes", "docs", "benchmarks", "tests", ".ci")
_TOP_FILES = ("README.md", "setup.cfg", "pyproject.toml")
# A repository path inside code: starts at a word boundary with a top-level folder or file of the repository.
_REPO_PATH = re.compile(
    r"(?<![\w./~-])((?:%s)/[\w./-]*|(?:%s)(?![\w.-]))" % ("|".join(re.escape(d) for d in _TOP_DIRS),
                                                        "|".join(re.escape(f) for f in _TOP_FILES)))
_FENCED = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[^\n]*\n(.*?)^[ ]{0,3}\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _markdown_files() -> list[Path]:
    return sorted({p for pattern in LINKING_DOCS for p in REPO.glob(pattern) if p.is_file()})


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _code_spans(text: str) -> list[tuple[int, str]]:
    """(offset, content) of every fenced block and inline code span of a Markdown text."""
    spans = [(m.start(2), m.group(2)) for m in _FENCED.finditer(text)]
    rest = _FENCED.sub(lambda m: " " * len(m.group(0)), text)  # same offsets, fences blanked
    spans += [(m.start(2), m.group(2)) for m in _INLINE.finditer(rest)]
    return spans


def _named_paths(doc: Path) -> list[tuple[int, str, Path]]:
    """(line, as written, resolved path) of every relative link and every repository path in code in ``doc``."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for offset, code in _code_spans(text):
        for m in _REPO_PATH.finditer(code):
            raw = m.group(1)
            if any(c in code[m.end(1):m.end(1) + 1] for c in "<{*"):
                continue  # a pattern such as `tests/sandbox/candidates/a1_*.py` or `runs/<name>/`, not a path
            path = re.sub(r"(::[\w.]+|:\d+(-\d+)?|#[\w-]*)$", "", raw).rstrip(".,;:")
            found.append((_line_of(text, offset + m.start(1)), raw, REPO / path))
    prose = _FENCED.sub(lambda m: " " * len(m.group(0)), text)
    for m in _LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        found.append((_line_of(text, m.start(1)), target, (doc.parent / path)))
    return found


def _scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        root = REPO / name
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        for p in candidates:
            rel = p.relative_to(REPO).parts
            if not p.is_file() or p.resolve() == THIS_FILE or "__pycache__" in rel:
                continue
            if any(part.startswith(".") for part in rel):
                continue
            files.append(p)
    return files


def _matches(patterns: list[re.Pattern]) -> list[str]:
    """``path:line: text`` of every line of the scanned files that one of ``patterns`` matches."""
    hits = []
    for path in _scanned_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in patterns):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    return hits


def test_every_path_the_docs_name_exists():
    assert _markdown_files(), "no Markdown found"
    missing = [f"{doc.relative_to(REPO)}:{line}: {raw}"
               for doc in _markdown_files() for line, raw, path in _named_paths(doc) if not path.exists()]
    assert missing == [], "paths named in the docs that do not exist:\n" + "\n".join(missing)


# The team's own notes live outside the repository; the repository stands alone and never cites them.
OUTSIDE_NOTES = [re.escape(s) for s in ("../shared", "shared/reference", "kevin-method.md", "sandbox-threats.md",
                                        "rl-frameworks.md", "style-models.md", "kernel-gen-landscape.md",
                                        "gpu-notes.md")]
OUTSIDE_NOTES.append(r"(?<![\w/-])DESIGN\.md")  # upper case: the team's note, not docs/design.md

# The history of the work (numbered measurement runs, work stops and sessions, the scripts of device calls) lives
# in benchmarks/LOG.md only; "per run", "dry run" and "it runs 20 steps" are not history.
_COUNTED = (r"(?!\s*(?:steps?|turns?|times|processes|tasks|trajectories|seeds|epochs|iterations|workers|GPUs?|"
            r"threads|candidates|kernels|samples|calls|tokens|rows|layers|[x×%]))")  # "run 2 processes" is no history
HISTORY = [
    r"\b[Rr]un \d+\b(?![.,]\d)" + _COUNTED,  # "run 30", "Run 29 (the earlier rule)"; not "the run 16.29 s"
    r"\bruns \d+\s*(?:-|–|,|and)\s*\d+",  # "runs 25-29", "runs 1 and 2", "runs 14 and 16"
    r"\b[Ss]tops? \d+\b" + _COUNTED,  # "stop 13", "stop 15's code"
    r"gpu_call_",  # the device-call scripts
    r"\b[Ss]essions? \d+\b",
]


def test_no_file_cites_the_notes_outside_the_repository():
    hits = _matches([re.compile(p) for p in OUTSIDE_NOTES])
    assert hits == [], "references to documents outside the repository:\n" + "\n".join(hits)


def test_no_file_tells_the_history_of_the_work():
    hits = _matches([re.compile(p) for p in HISTORY])
    assert hits == [], "history of the work (it belongs in benchmarks/LOG.md):\n" + "\n".join(hits)

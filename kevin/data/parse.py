"""`parse_response(text)`: split a model response into thought, code and summary.

The paper leaves parsing open (docs/method.md, "Parsing and failed turns"); these are our rules:

1. **Line ends.** ``\\r\\n`` and lone ``\\r`` become ``\\n`` first.
2. **Thought.** The text inside ``<think>...</think>`` (stripped). If the response has ``</think>`` but no
   ``<think>`` (chat templates such as QwQ's put ``<think>\\n`` in the generation prompt, so the sampled
   text starts inside the thought), the thought is everything before ``</think>``. A ``<think>`` that is
   never closed means the response ended mid-thought (cut off, or stopped): a parse failure (``error``
   set, no code). With no tags at all the thought is None and the whole text is the answer, unless the
   caller says the prompt opened the thought (``in_thought=True``; the rollout passes
   `Generation.in_thought`): then the text starts inside the thought, and without ``</think>`` it has
   no answer, so code drafted while thinking never counts. The first ``</think>`` after the
   opening tag ends the thought.
3. **Code.** Only the answer (the text after the thought) is searched, so code written while thinking
   never counts. A fenced block (```` ``` ```` or ``~~~``, any length >= 3, closed by a fence of the same
   character at least as long; an unclosed fence runs to the end) is a candidate when a line of it starts
   with ``class ModelNew`` at column 0 (a module-level class, which is what the sandbox loads).
   Among candidates, blocks labelled python (``python``, ``py``, ``python3``) or unlabelled are preferred,
   and **the last one wins**: models often show a draft and then the final version, and the final
   version is what they mean to submit.
4. **No fences.** When the answer has no fence at all and exactly one line starts with ``class ModelNew``,
   the bare program is taken if it can be delimited unambiguously: from the first ``import``/``from``
   line before the class (else the class line) to the first later column-0 line that does not look like
   Python, and the span must parse with :func:`ast.parse`; when it does not, the next ``import``/``from``
   line is tried as the start (prose such as "from the feedback, ..." is not code).
5. **Summary.** The text after the chosen block (stripped); None when empty. A missing summary is not an
   error.
6. **Errors.** ``error`` is a short message for the model when no code is found
   (``"no code block defining ModelNew"``) or the thought is unclosed; otherwise None.

>>> r = parse_response("<think>Okay, fuse it.</think>\\n```python\\nclass ModelNew:\\n    pass\\n```\\nFused.")
>>> r.thought, r.code, r.summary, r.error
('Okay, fuse it.', 'class ModelNew:\\n    pass\\n', 'Fused.', None)
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["ParsedResponse", "parse_response", "NO_CODE_ERROR", "UNCLOSED_THINK_ERROR"]

NO_CODE_ERROR = "no code block defining ModelNew"
UNCLOSED_THINK_ERROR = "the response ended inside <think> (no closing </think>), so it has no answer"

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_DEFINES_MODELNEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)
_FENCE_OPEN = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[ \t]*([^\n`]*)$")
_PYTHON_LABELS = {"", "python", "py", "python3", "py3"}
# Column-0 lines that may continue a bare Python program (statements, decorators, comments, strings).
_CODE_LINE = re.compile(
    r"^(import\s|from\s|class\s|def\s|async\s|@|#|if\s|elif\s|else\b|for\s|while\s|with\s|try\b|except\b|"
    r"finally\b|return\b|raise\b|assert\s|del\s|global\s|\)|\]|\}|'''|\"\"\"|r\"\"\"|r'''|"
    r"[A-Za-z_][\w.]*(\[[^\]]*\])?\s*(=|\(|:\s*\w.*=|\+=|-=|\*=))"
)


@dataclass(frozen=True)
class ParsedResponse:
    """The parts of one response. ``None`` means "not present"; ``error`` is None on success."""

    thought: str | None
    code: str | None
    summary: str | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class _Block:
    label: str  # first word of the info string, lower-cased ("" when none)
    body: str  # the block's lines joined, ending with "\n"
    end: int  # index in the answer's line list just past the closing fence


def parse_response(text: str, *, in_thought: bool = False) -> ParsedResponse:
    """Split ``text`` into thought, code and summary following the module's rules 1-6. ``in_thought``: the prompt
    ended with an open ``<think>``, so ``text`` starts inside the thought (rule 2)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if in_thought and not text.lstrip().startswith(_THINK_OPEN):
        text = _THINK_OPEN + "\n" + text  # (a <think> quoted later in the text does not count as the opening)
    thought, answer, error = _split_thought(text)
    if error is not None:
        return ParsedResponse(thought=thought, code=None, summary=None, error=error)
    lines = answer.split("\n")
    blocks = _fenced_blocks(lines)
    if blocks:
        candidates = [b for b in blocks if _DEFINES_MODELNEW.search(b.body)]
        preferred = [b for b in candidates if b.label in _PYTHON_LABELS] or candidates
        if not preferred:
            return ParsedResponse(thought=thought, code=None, summary=None, error=NO_CODE_ERROR)
        chosen = preferred[-1]
        return ParsedResponse(thought, chosen.body, _summary(lines[chosen.end :]), None)
    bare = _bare_program(lines)
    if bare is None:
        return ParsedResponse(thought=thought, code=None, summary=None, error=NO_CODE_ERROR)
    code, end = bare
    return ParsedResponse(thought, code, _summary(lines[end:]), None)


def _split_thought(text: str) -> tuple[str | None, str, str | None]:
    """-> (thought, answer, error)."""
    open_at = text.find(_THINK_OPEN)
    if open_at >= 0:
        start = open_at + len(_THINK_OPEN)
        close_at = text.find(_THINK_CLOSE, start)
        if close_at < 0:
            return text[start:].strip(), "", UNCLOSED_THINK_ERROR
        return text[start:close_at].strip(), text[close_at + len(_THINK_CLOSE) :], None
    close_at = text.find(_THINK_CLOSE)
    if close_at >= 0:  # the opening tag was part of the prompt
        return text[:close_at].strip(), text[close_at + len(_THINK_CLOSE) :], None
    return None, text, None


def _fenced_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
            i += 1
            continue
        fence = m.group(1)
        info = m.group(2).strip().split()
        label = info[0].lower() if info else ""
        close = re.compile(r"^[ ]{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = "\n".join(lines[i + 1 : j]).rstrip()  # trailing blank lines dropped; one final newline
        blocks.append(_Block(label=label, body=body + "\n" if body else "", end=min(j + 1, len(lines))))
        i = j + 1
    return blocks


def _bare_program(lines: list[str]) -> tuple[str, int] | None:
    """-> (code, index just past its last line) for an unfenced program defining ModelNew, or None."""
    class_lines = [i for i, line in enumerate(lines) if _DEFINES_MODELNEW.match(line)]
    if len(class_lines) != 1:
        return None
    cls = class_lines[0]
    imports = [i for i in range(cls) if re.match(r"(import|from)\s", lines[i])]
    for start in imports or [cls]:  # the earliest start whose span parses: prose may begin with "from "
        found = _bare_span(lines, start, cls)
        if found is not None:
            return found
    return None


def _bare_span(lines: list[str], start: int, cls: int) -> tuple[str, int] | None:
    """-> (code, end) for the program from line ``start`` through the class at line ``cls``, or None when it does not
    parse."""
    end = len(lines)
    in_string = False  # crude triple-quote tracking so CUDA sources inside r\"\"\"...\"\"\" are skipped
    for i in range(start, len(lines)):
        line = lines[i]
        if i > cls and not in_string and line and not line[0].isspace() and not _CODE_LINE.match(line):
            end = i
            break
        if (line.count('"""') + line.count("'''")) % 2 == 1:
            in_string = not in_string
    while end > start and not lines[end - 1].strip():
        end -= 1
    code = "\n".join(lines[start:end]) + "\n"
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    return code, end


def _summary(lines: list[str]) -> str | None:
    summary = "\n".join(lines).strip()
    return summary or None

"""Parsing a response into thought, code and summary."""

from kevin.data.parse import NO_CODE_ERROR, UNCLOSED_THINK_ERROR, parse_response
from kevin.data.prompts import EXAMPLE_CUDA

CODE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
DRAFT = "class ModelNew(torch.nn.Module):\n    # draft\n    pass\n"


def block(code: str, label: str = "python") -> str:
    return f"```{label}\n{code}```"


def test_think_block_and_summary_are_split():
    r = parse_response(f"<think>\nOkay, let me fuse.\n</think>\n\nHere it is:\n{block(CODE)}\n\nI fused the ops.\n")
    assert r.thought == "Okay, let me fuse."
    assert r.code == CODE
    assert r.summary == "I fused the ops."
    assert r.error is None and r.ok


def test_unclosed_think_is_a_parse_failure_with_the_partial_thought():
    r = parse_response(f"<think>\nOkay, so the kernel {block(CODE)} and then I keep thinking")
    assert r.error == UNCLOSED_THINK_ERROR
    assert r.code is None and r.summary is None
    assert r.thought.startswith("Okay, so the kernel")


def test_code_inside_the_thought_is_ignored():
    r = parse_response(f"<think>Try this:\n{block(CODE)}\n</think>\nI could not finish.")
    assert r.code is None
    assert r.error == NO_CODE_ERROR


def test_closing_tag_alone_ends_a_thought_opened_by_the_chat_template():
    r = parse_response(f"Okay, thinking with {block(DRAFT)}\n</think>\n{block(CODE)}\nDone.")
    assert r.thought.startswith("Okay, thinking")
    assert r.code == CODE and r.summary == "Done."


def test_last_block_defining_modelnew_wins_and_other_blocks_are_skipped():
    text = (
        f"Draft:\n{block(DRAFT)}\nFinal:\n{block(CODE)}\n"
        f"Usage:\n{block('m = ModelNew()' + chr(10))}\nSummary: final version."
    )
    r = parse_response(text)
    assert r.code == CODE
    # The summary is everything after the chosen block, the usage block included.
    assert r.summary.startswith("Usage:") and r.summary.endswith("Summary: final version.")


def test_python_labelled_block_is_preferred_over_a_later_cpp_block_mentioning_modelnew():
    cpp = "class ModelNew {\n};\n"
    r = parse_response(f"{block(CODE)}\n{block(cpp, 'cpp')}\nDone.")
    assert r.code == CODE


def test_crlf_line_ends_are_normalised():
    text = f"<think>Okay.</think>\n{block(CODE)}\nShort summary.\n".replace("\n", "\r\n")
    r = parse_response(text)
    assert r.code == CODE and "\r" not in r.code
    assert r.summary == "Short summary."


def test_bare_program_without_fences_is_found_when_unambiguous():
    r = parse_response(f"Here is my answer.\n\n{EXAMPLE_CUDA}\nThis launches 256-thread blocks.\n")
    assert r.code == EXAMPLE_CUDA
    assert r.summary == "This launches 256-thread blocks."


def test_bare_text_with_two_modelnew_classes_is_ambiguous():
    r = parse_response(f"{CODE}\nor maybe\n{CODE}")
    assert r.code is None and r.error == NO_CODE_ERROR


def test_missing_summary_is_not_an_error():
    r = parse_response(block(CODE) + "\n   \n")
    assert r.code == CODE and r.summary is None and r.error is None


def test_response_without_code_reports_a_short_error():
    r = parse_response("<think>Okay.</think>\nI think a tiled kernel would help.")
    assert r.code is None and r.summary is None
    assert r.error == "no code block defining ModelNew"


def test_blocks_without_modelnew_do_not_count():
    r = parse_response(block("def helper():\n    return 1\n") + "\nthat's it")
    assert r.error == NO_CODE_ERROR


def test_longer_fence_keeps_inner_backticks_inside_the_block():
    code = 'class ModelNew:\n    doc = """\n```\n"""\n'
    r = parse_response(f"````python\n{code}````\nSummary here.")
    assert r.code == code and r.summary == "Summary here."


def test_unclosed_fence_runs_to_the_end():
    r = parse_response("```python\n" + CODE)
    assert r.code == CODE and r.summary is None and r.error is None


def test_response_without_think_tags_has_no_thought():
    r = parse_response(block(CODE) + "\nOk.")
    assert r.thought is None and r.code == CODE


def test_the_prompt_examples_round_trip_through_a_fenced_answer():
    from kevin.data.prompts import EXAMPLE_CPU, fence

    for example in (EXAMPLE_CUDA, EXAMPLE_CPU):
        r = parse_response(f"<think>Okay.</think>\n{fence(example)}\nAdds with one loop.")
        assert r.code == example and r.summary == "Adds with one loop." and r.error is None


def test_tilde_fences_are_accepted():
    r = parse_response(f"~~~python\n{CODE}~~~\nDone.")
    assert r.code == CODE and r.summary == "Done."


def test_bare_program_after_prose_that_starts_with_from_is_found():
    # "from the feedback ..." matches the import pattern; the span from it does not parse, the one from "import" does
    text = f"from the feedback I fixed the index.\n\n{CODE}\nDone.\n"
    r = parse_response(text)
    assert r.code == CODE and r.summary == "Done."


def test_bare_program_interrupted_by_prose_is_ambiguous():
    text = "import torch\n\nNow the class, which does the work:\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    assert parse_response(text).error == NO_CODE_ERROR


def test_a_prompt_that_opened_the_thought_makes_an_unclosed_response_all_thought():
    draft = f"Okay, a draft:\n{block(CODE)}\nHmm, wrong."
    r = parse_response(draft, in_thought=True)
    assert r.code is None and r.error == UNCLOSED_THINK_ERROR and r.thought.startswith("Okay, a draft")
    assert parse_response(draft).code == CODE  # without it, the text is all answer


def test_a_prompt_that_opened_the_thought_still_parses_a_closed_one():
    r = parse_response(f"Okay.\n</think>\n{block(CODE)}\nI kept the <think> tag out.", in_thought=True)
    assert r.thought == "Okay." and r.code == CODE and r.summary == "I kept the <think> tag out."

from kevin.core.types import Turn
from kevin.sandbox.result import EvalResult

OK = EvalResult("correct", "ok")


def test_token_counts_are_the_ids_lengths_when_the_backend_gave_ids():
    turn = Turn((1, 2, 3), (4, 5), "", OK, reported_prompt_tokens=100, reported_generated_tokens=50)
    assert (turn.prompt_tokens, turn.generated_tokens) == (3, 2)  # the ids win over any reported count


def test_token_counts_fall_back_to_the_reported_ones_without_ids():
    turn = Turn((), (), "", OK, reported_prompt_tokens=100, reported_generated_tokens=50)
    assert (turn.prompt_tokens, turn.generated_tokens) == (100, 50)


def test_token_counts_are_zero_with_neither_ids_nor_reported_counts():
    turn = Turn((), (), "", OK)
    assert (turn.prompt_tokens, turn.generated_tokens) == (0, 0)

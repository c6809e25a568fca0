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


# --- beam search fields: replica, pruned --------------------------------------------------------------


def test_a_replica_and_pruned_turns_survive_a_round_trip():
    from kevin.core.types import Trajectory

    copy, dropped = Turn((1,), (2,), "copy", OK, replica=True), Turn((3,), (4,), "dropped", OK)
    traj = Trajectory("t0", 0, 1, (copy,), pruned=((0, dropped),))
    assert Trajectory.from_dict(traj.to_dict()) == traj


def test_records_without_beam_search_have_neither_field():
    from kevin.core.types import Trajectory

    d = Trajectory("t0", 0, 0, (Turn((1,), (2,), "", OK),)).to_dict()
    assert "pruned" not in d and "replica" not in d["turns"][0]


def test_a_record_written_without_the_fields_loads_with_their_defaults():
    from kevin.core.types import Trajectory

    turn = {"prompt_ids": [1], "response_ids": [2], "response_text": "", "result": OK.to_dict()}
    traj = Trajectory.from_dict({"task_id": "t0", "task_index": 0, "trajectory_index": 0, "turns": [turn]})
    assert traj.pruned == () and traj.turns[0].replica is False

"""How a step's work is dealt to the processes (kevin/core/run/shards.py) and the exact loss weights of uneven shares
(kevin/core/batch.py, loss_weight); the learner's helpers that need no second process (kevin/core/run/learner.py)."""

from types import SimpleNamespace

import pytest
import torch

from kevin.core.batch import collate, loss_weight
from kevin.core.run.shards import (minibatches_everywhere, own_samples, place, share_tasks, trajectory_share)
from kevin.core.types import Sample, Trajectory


def test_a_steps_trajectories_are_dealt_in_contiguous_blocks():
    # B=2 tasks x G=3 = 6 trajectories on 4 processes: process r takes indices [6r/4, 6(r+1)/4) = [0,1), [1,3), [3,4),
    # [4,6); index i is (task i // 3, trajectory i % 3)
    shares = [trajectory_share(2, 3, r, 4) for r in range(4)]
    assert shares == [[(0, 0)], [(0, 1), (0, 2)], [(1, 0)], [(1, 1), (1, 2)]]


def test_one_task_per_process_when_the_tasks_match_the_processes():
    # the paper's 8 tasks x 16 on 8 GPUs: process r runs task r's 16 trajectories
    assert [sorted({b for b, _ in trajectory_share(8, 16, r, 8)}) for r in range(8)] == [[r] for r in range(8)]


@pytest.mark.parametrize("world", [1, 2, 3, 5, 7, 12])
def test_every_trajectory_is_run_by_exactly_one_process(world):
    dealt = [pair for r in range(world) for pair in trajectory_share(3, 4, r, world)]
    assert dealt == [(b, g) for b in range(3) for g in range(4)]


def test_more_processes_than_trajectories_is_refused_as_a_bad_option():
    from kevin.core.run.cli import ConfigError

    with pytest.raises(ConfigError, match="3 processes for 1 x 2 trajectories"):
        trajectory_share(1, 2, 0, 3)


def test_a_share_lists_each_trajectorys_task_and_places_the_rollout_back():
    share = [(0, 2), (1, 0)]
    assert share_tasks(["a", "b"], share) == ["a", "b"]
    rolled = [Trajectory("a", 0, 0, ()), Trajectory("b", 1, 0, ())]  # rollout of one trajectory per listed task
    assert [(t.task_id, t.task_index, t.trajectory_index) for t in place(rolled, share)] == [("a", 0, 2), ("b", 1, 0)]


def _sample(task: int, trajectory: int, turn: int = 0, n_tokens: int = 1, advantage: float = 0.0) -> Sample:
    return Sample((1, 2), (3,) * n_tokens, (1,) * n_tokens, 0.0, advantage, f"t{task}", task, trajectory, turn)


def test_a_process_trains_on_its_own_trajectories_samples_only():
    samples = [_sample(b, g, t) for b in range(2) for g in range(2) for t in range(2)]
    mine = own_samples(samples, [(0, 1), (1, 0)])
    assert [(s.task_index, s.trajectory_index, s.turn_index) for s in mine] == [(0, 1, 0), (0, 1, 1), (1, 0, 0),
                                                                                (1, 0, 1)]


def test_per_sequence_weights_count_the_sequences_of_every_process():
    # this process holds 3 sequences, the other 1 (4 in all, 2 processes): a micro-batch of 2 weighs 2 * 2 / 4 = 1,
    # the other micro-batch of 1 weighs 2 * 1 / 4 = 0.5; averaged over the 2 processes each sequence weighs 1/4
    full = collate([_sample(0, g) for g in range(3)], pad_id=0)
    two, one = collate([_sample(0, 0), _sample(0, 1)], pad_id=0), collate([_sample(0, 2)], pad_id=0)
    assert loss_weight(two, full, "seq-mean-token-mean", samples_everywhere=4, world=2) == 1.0
    assert loss_weight(one, full, "seq-mean-token-mean", samples_everywhere=4, world=2) == 0.5
    assert loss_weight(one, full, "seq-mean-token-mean") == pytest.approx(1 / 3)  # without: this process alone


def test_uneven_shares_weighted_and_averaged_give_the_mean_over_all_sequences():
    # per-sequence losses 1, 2, 3 on process 0 and 10 on process 1: the mean over the 4 is 16 / 4 = 4
    losses = {0: [1.0, 2.0, 3.0], 1: [10.0]}
    batches = {r: [collate([_sample(0, g)], pad_id=0) for g in range(len(v))] for r, v in losses.items()}
    fulls = {r: collate([_sample(0, g) for g in range(len(v))], pad_id=0) for r, v in losses.items()}
    per_process = [sum(loss * loss_weight(mb, fulls[r], "seq-mean-token-mean", samples_everywhere=4, world=2)
                       for loss, mb in zip(losses[r], batches[r])) for r in (0, 1)]
    assert sum(per_process) / 2 == pytest.approx(4.0)  # gradients (and logged losses) are averaged over processes


class _TwoProcesses:
    """An accelerator stand-in for process 0 of 2, the other reporting ``other`` = [micro-batches, samples, tokens]."""

    device = torch.device("cpu")
    num_processes = 2

    def __init__(self, other):
        self.other = other

    def gather(self, counts):
        return torch.cat([counts, torch.tensor([self.other], dtype=counts.dtype)])


def test_every_process_runs_as_many_micro_batches_as_the_busiest_the_extra_ones_weighing_nothing():
    # 3 samples here in micro-batches of 2: 2 micro-batches; the other process runs 4, so 2 padding ones are added
    samples = [_sample(0, g, n_tokens=2) for g in range(3)]
    [mini] = minibatches_everywhere(_TwoProcesses([4, 7, 20]), samples, 1, seed=0, pad_id=0, micro_batch_size=2)
    assert [mb.size for mb in mini.micros] == [2, 1, 1, 1] and mini.keep == [1.0, 1.0, 0.0, 0.0]
    assert (mini.samples_everywhere, mini.tokens_everywhere) == (3 + 7, 3 * 2 + 20)


def test_a_process_with_no_share_of_a_mini_batch_runs_padding_that_counts_for_nothing():
    # 1 sample dealt into 2 mini-batches: the second is empty here, so its first sample runs with weight 0
    minis = minibatches_everywhere(_TwoProcesses([1, 1, 5]), [_sample(0, 0, n_tokens=3)], 2, seed=0, pad_id=0,
                                   micro_batch_size=4)
    assert [m.keep for m in minis] == [[1.0], [0.0]]
    assert [(m.samples_everywhere, m.tokens_everywhere) for m in minis] == [(2, 8), (1, 5)]


def test_the_sandbox_workers_are_shared_by_the_processes_of_this_node(monkeypatch):
    from kevin.core.run.learner import local_processes

    acc = SimpleNamespace(num_processes=16)  # 2 nodes of 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert local_processes(acc) == 8
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert local_processes(acc) == 16


def test_a_model_without_fsdp_units_samples_as_it_is():
    from kevin.core.run.learner import full_parameters

    model = torch.nn.Linear(2, 2)
    before = [p for p in model.parameters()]
    with full_parameters(model) as inside:
        assert inside is model and [p for p in inside.parameters()] == before


@pytest.mark.parametrize("backend, groups", [(None, 1), ("cpu", 1), ("cuda", 2)],
                         ids=["other sandbox", "kevin's on the CPU", "kevin's on CUDA"])
def test_a_share_is_rolled_out_one_trajectory_per_listed_task_grouped_as_the_rollout_groups_its_tasks(backend,
                                                                                                       groups):
    # a share of 2 tasks x 3 trajectories is listed as 6 one-trajectory tasks: on CUDA kevin's sandbox gets a
    # pipelined group per task (2), not per listed task (6); anything else the lockstep rollout (1 group)
    from kevin.core.run.shards import rollout_layout
    from kevin.sandbox import Sandbox

    sandbox = object()
    if backend is not None:
        sandbox = Sandbox.__new__(Sandbox)  # (no processes: only its backend is read)
        sandbox.backend = backend
    share = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert rollout_layout(share, sandbox) == {"n_trajectories": 1, "chunks": groups, "stagger": 1}


def test_a_shares_waves_are_at_most_its_groups():
    # 2 tasks x 3 trajectories on kevin's sandbox on CUDA: 2 groups (one per task), so stagger 4 starts 2 waves
    from kevin.core.run.shards import rollout_layout
    from kevin.sandbox import Sandbox

    sandbox = Sandbox.__new__(Sandbox)  # (no processes: only its backend is read)
    sandbox.backend = "cuda"
    share = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert rollout_layout(share, sandbox, 4) == {"n_trajectories": 1, "chunks": 2, "stagger": 2}


def test_a_share_of_one_trajectory_is_not_staggered():
    # one process's share of 2 tasks x 3 trajectories over 4 processes can be a single trajectory: one group, which
    # the rollout runs in lockstep, so one wave (a stagger there would be refused by the rollout)
    from kevin.core.run.shards import rollout_layout
    from kevin.sandbox import Sandbox

    sandbox = Sandbox.__new__(Sandbox)
    sandbox.backend = "cuda"
    assert rollout_layout([(0, 0)], sandbox, 2) == {"n_trajectories": 1, "chunks": 1, "stagger": 1}

"""BatchSampler: every batch mixes the levels, proportionally, without replacement, resumable exactly."""

import itertools
import json
from collections import Counter

import pytest

from kevin.data import BatchSampler, Task


def _pool(counts):
    """{level: n} -> tasks "L<level>-<i>"."""
    return [Task(f"L{level}-{i}", "", level=level) for level, n in counts.items() for i in range(n)]


def test_every_batch_holds_every_level_in_proportion():
    # 30 level-1 and 10 level-2 tasks, batch 4: shares 3/4 and 1/4 -> exactly 3 + 1 per batch
    sampler = BatchSampler(_pool({1: 30, 2: 10}), 4, seed=0)
    for _ in range(20):
        assert Counter(t.level for t in sampler.next_batch()) == {1: 3, 2: 1}


def test_small_level_gets_a_slot_in_every_batch_when_the_batch_allows():
    # level 3 is 2 of 42 tasks: its share of a batch of 4 is 0.19, still one slot every batch
    sampler = BatchSampler(_pool({1: 30, 2: 10, 3: 2}), 4, seed=0)
    for _ in range(10):
        assert {t.level for t in sampler.next_batch()} == {1, 2, 3}


def test_long_run_proportions_follow_the_pool_when_quotas_are_fractional():
    # shares 2/3 and 1/3 of a batch of 5: 3.33 and 1.67 slots per batch; 30 batches -> 100 and 50
    sampler = BatchSampler(_pool({1: 20, 2: 10}), 5, seed=0)
    counts = Counter(t.level for batch in itertools.islice(sampler, 30) for t in batch)
    assert counts == {1: 100, 2: 50}


def test_an_epoch_within_a_level_draws_each_task_once():
    sampler = BatchSampler(_pool({1: 30, 2: 10}), 4, seed=5)
    # 10 batches take 30 level-1 draws: one full epoch of level 1
    level1 = [t.task_id for _ in range(10) for t in sampler.next_batch() if t.level == 1]
    assert sorted(level1) == sorted(f"L1-{i}" for i in range(30))


def test_batches_have_the_requested_size_when_smaller_than_the_number_of_levels():
    sampler = BatchSampler(_pool({1: 5, 2: 5, 3: 5}), 2, seed=0)
    assert all(len(sampler.next_batch()) == 2 for _ in range(10))


def test_same_seed_same_batches_other_seed_other_batches():
    pool = _pool({1: 30, 2: 10})
    run = lambda seed: [[t.task_id for t in b] for b in itertools.islice(BatchSampler(pool, 4, seed=seed), 5)]
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_resumed_sampler_gives_exactly_the_same_next_batches():
    pool = _pool({1: 13, 2: 7, None: 3})
    original = BatchSampler(pool, 5, seed=3)
    for _ in range(7):
        original.next_batch()
    state = json.loads(json.dumps(original.state_dict()))  # as a checkpoint stores it
    resumed = BatchSampler(pool, 5, seed=3)
    resumed.load_state_dict(state)
    for _ in range(10):
        assert [t.task_id for t in resumed.next_batch()] == [t.task_id for t in original.next_batch()]


def test_state_from_other_tasks_is_refused():
    state = BatchSampler(_pool({1: 4}), 2).state_dict()
    with pytest.raises(ValueError, match="different task list"):
        BatchSampler(_pool({1: 5}), 2).load_state_dict(state)

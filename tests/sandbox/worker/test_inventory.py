"""The profiler inventory counts the operators a forward called itself, not the ones inside them or the harness's."""

import torch

from kevin.sandbox.worker.inventory import HARNESS, ProfiledOps, top_level_aten_ops


def _profiled(fn):
    prof = torch.autograd.profiler.profile()
    with prof:
        fn()
    return prof


def test_top_level_ops_agree_with_the_profilers_own_tree():
    # the profiler's FunctionEvent tree (slow) and the sweep over raw events (fast) must name the same ops
    x = torch.randn(64)

    def forward():
        for _ in range(5):
            with torch.autograd.profiler.record_function(HARNESS):
                y = x[torch.randperm(64)].clone()
            (torch.relu(y) + 1).sum()
            y.view(8, 8).t().contiguous()

    prof = _profiled(forward)
    tree: dict[str, int] = {}
    for e in prof.function_events:
        if e.cpu_parent is None and e.name.startswith("aten::"):
            tree[e.name[len("aten::"):]] = tree.get(e.name[len("aten::"):], 0) + 1
    assert top_level_aten_ops(prof.kineto_results.events()) == tree


def test_an_op_called_inside_another_is_not_counted():
    # clone dispatches empty_strided and copy_ inside itself: one top-level op, clone
    x = torch.randn(16)
    assert top_level_aten_ops(_profiled(lambda: x.clone()).kineto_results.events()) == {"clone": 1}


def test_the_harness_scope_hides_its_ops_and_a_forwards_compute_is_seen():
    # 1 relu outside the harness scope, 1 inside: only the one outside is the forward's
    x = torch.randn(16)

    def forward():
        with torch.autograd.profiler.record_function(HARNESS):
            torch.relu(x)
        torch.relu(x)

    watch = ProfiledOps()
    with watch:
        forward()
    assert watch.ops == {"relu": 1}
    assert watch.compute_ops == ["relu"]

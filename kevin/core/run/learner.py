"""What a training recipe trains, set up for accelerate: the `accelerator`, and the model with its optimiser
(`build_learner`), replicated (one process, DDP) or sharded (FSDP2, from ``accelerate launch --config_file`` with
``distributed_type: FSDP`` and ``fsdp_version: 2``: recipes/configs/accelerate/). The update itself (old log-probs,
the GRPO loss, the gradient steps) is the recipe's.

Under FSDP2 a parameter of the prepared model is a ``DTensor`` holding this process's shard; `full_parameters`
all-gathers them for sampling, where every process runs a different number of forwards.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from typing import Any, Iterator

import torch


def accelerator(*, bf16: bool, project_dir: str, tracker: str = "none") -> Any:
    """An ``accelerate.Accelerator``: one process per GPU (the CPU where there is none), bf16 autocast on CUDA with
    ``bf16``, and the ``tracker`` ("none": none) for `RunDir.start`. An FSDP launch gets FSDP2 on CPU processes too
    (`fsdp_on_cpu`); FSDP1 is refused."""
    from accelerate import Accelerator

    cuda = torch.cuda.is_available()
    acc = Accelerator(cpu=not cuda, mixed_precision="bf16" if bf16 and cuda else "no", project_dir=project_dir,
                      log_with=None if tracker == "none" else tracker)
    fsdp_on_cpu(acc)
    if is_sharded(acc) and not acc.is_fsdp2:
        raise SystemExit("FSDP1 is not supported: set fsdp_version: 2 (recipes/configs/accelerate/fsdp2.yaml)")
    return acc


def fsdp_on_cpu(acc: Any) -> bool:
    """Put accelerate's FSDP2 plugin in place on CPU processes that were launched for FSDP (``ACCELERATE_USE_FSDP``
    and ``FSDP_VERSION=2`` in the environment, as ``accelerate launch --config_file`` sets them); returns whether it
    did.

    accelerate 1.16 enables FSDP only for accelerator devices (``AcceleratorState`` lists MULTI_GPU and its kin, not
    MULTI_CPU) and otherwise runs the processes as DDP without a word; torch's FSDP2 itself runs on gloo. This is how
    the sharded path is tested on a machine without a GPU (tests/recipes/test_fsdp.py).
    """
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    wanted = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and os.environ.get("FSDP_VERSION") == "2"
    if not wanted or acc.distributed_type != DistributedType.MULTI_CPU:
        return False
    acc.state.fsdp_plugin = FullyShardedDataParallelPlugin()
    acc.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True


def is_sharded(acc: Any) -> bool:
    """Whether ``acc`` shards the model (FSDP) rather than replicating it (one process, DDP)."""
    from accelerate.utils import DistributedType

    return acc.distributed_type == DistributedType.FSDP


def local_processes(acc: Any) -> int:
    """How many training processes run on this node (``LOCAL_WORLD_SIZE``, set by torchrun and accelerate launch;
    else the global count): the share of this node's cores a process's sandbox may use."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", acc.num_processes))


@dataclass
class Learner:
    """What one process trains: ``model`` wrapped by accelerate (DDP: the loss's forward and backward; FSDP2: the
    same module, sharded in place), the unwrapped ``net`` (sampling, old log-probs, checkpoints), the frozen KL
    reference ``ref`` (a copy of the initial model of a full fine-tune; None without KL, and with LoRA, whose reference
    is ``net`` with its adapters disabled), the ``tokenizer``, the trainable ``params`` (after preparation: FSDP2
    replaces them by their shards), the AdamW ``optimizer`` and its warm-up ``scheduler`` (stepped once per gradient
    step), and whether the model is ``sharded``."""

    acc: Any
    model: Any
    net: Any
    ref: Any
    tokenizer: Any
    params: list
    optimizer: Any
    scheduler: Any
    sharded: bool = False

    def clip_gradients(self, max_norm: float) -> Any:
        """Clip the gradient of ``params`` to ``max_norm`` (accelerate's ``clip_grad_norm_``) and return its total
        norm before clipping as a plain tensor, the same on every process (FSDP2 under torch 2.11 returns a DTensor,
        which later collectives on plain tensors refuse)."""
        norm = self.acc.clip_grad_norm_(self.params, max_norm)
        full = getattr(norm, "full_tensor", None)
        return full() if callable(full) else norm

    def full_parameters(self, needed: bool = True) -> contextlib.AbstractContextManager:
        """`full_parameters` of ``net``: around sampling with it and handing weights to vLLM (``needed`` False: a
        no-op, e.g. a rollout that vLLM samples, which would otherwise hold a gathered copy for nothing)."""
        return full_parameters(self.net) if needed else contextlib.nullcontext(self.net)


def build_learner(acc: Any, model: str, *, seed: int, bf16: bool, lora_rank: int, gradient_checkpointing: bool,
                  lr: float, weight_decay: float, warmup_steps: int, kl_reference: bool) -> Learner:
    """The `Learner` of ``model`` (a name for `kevin.core.policy.models.load_model`; ``lora_rank`` > 0: LoRA adapters
    are trained), identical on every process (``seed``): AdamW at ``lr`` after ``warmup_steps`` of linear warm-up, then
    constant; a frozen copy of the initial model as ``ref`` when ``kl_reference`` and no LoRA.

    Sharded (FSDP2): the main process reads the model on the host (as `load_model` gives it: fp32 for a full
    fine-tune), never whole onto the accelerator; with ``fsdp_cpu_ram_efficient_loading`` (the shipped configs) the
    others build it with meta parameters and read nothing (`load_model`'s ``empty``; without it, or with a KL
    reference to copy, every process reads it), and accelerate's FSDP2 plugin shards it on the accelerator from the
    main process's copy. FSDP2 keeps fp32 master weights, computes in bf16 with ``bf16`` on CUDA and reduces
    gradients in fp32, as DDP under autocast does."""
    from accelerate.utils import set_seed

    from kevin.core.policy.models import load_model

    sharded = is_sharded(acc)
    set_seed(seed)  # identical model init on every process
    # FSDP2 broadcasting the main process's weights while sharding: the others need none (a KL reference copies them)
    empty = (sharded and acc.state.fsdp_plugin.cpu_ram_efficient_loading and not acc.is_main_process
             and not (kl_reference and lora_rank <= 0))
    with _env("FSDP_CPU_RAM_EFFICIENT_LOADING", "false"):  # transformers' meta weights would not survive `load_model`
        net, tokenizer = load_model(model, device=torch.device("cpu") if sharded else acc.device, seed=seed, bf16=bf16,
                                    lora_rank=lora_rank, gradient_checkpointing=gradient_checkpointing, empty=empty)
    ref = copy.deepcopy(net).to(acc.device).eval().requires_grad_(False) if kl_reference and lora_rank <= 0 else None
    # A full fine-tune updates one tensor at a time: the multi-tensor kernels' temporaries are another copy of every
    # weight (7B: 28 GiB more at the optimizer step, past an H200 holding the sharded fp32 state); LoRA's are small.
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay,
                                  foreach=None if lora_rank > 0 else False)
    warmup = max(1, warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: min(1.0, (u + 1) / warmup))
    if sharded:
        _fsdp_precision(acc)
    wrapped, optimizer = acc.prepare(net, optimizer)  # DDP or FSDP2 over processes; the scheduler is stepped by hand
    params = [p for p in wrapped.parameters() if p.requires_grad]  # FSDP2: the shards the optimizer now holds
    return Learner(acc, wrapped, acc.unwrap_model(wrapped), ref, tokenizer, params, optimizer, scheduler, sharded)


def _fsdp_precision(acc: Any) -> None:
    """Under bf16 mixed precision: bf16 compute and all-gathers, fp32 gradient reduction (accelerate's default
    reduces in bf16, which would round the averaged gradient that clipping and AdamW see)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if acc.mixed_precision == "bf16":
        acc.state.fsdp_plugin.mixed_precision_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                            reduce_dtype=torch.float32)


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` inside the context (as it was after)."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


@contextlib.contextmanager
def full_parameters(model: Any) -> Iterator[Any]:
    """``model`` with every FSDP2 unit all-gathered and kept whole through any number of forwards, resharded after.

    Sampling runs as many forwards as its longest response needs, which differs between processes: a forward that
    all-gathers its unit would then wait forever for the others. Inside this context a forward makes no collective
    (torch 2.13: ``FSDPModule.unshard`` registers the unsharded parameters, and a unit that does not reshard after
    forward skips the all-gather of an unsharded group), and ``named_parameters`` gives plain full tensors (in the
    mixed-precision param dtype: bf16 under bf16, never a full fp32 copy). A model without FSDP units is yielded as is.
    Entering and leaving are collectives: every process must enter.
    """
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not units:
        yield model
        return
    states = [unit._get_fsdp_state() for unit in units]
    states[0]._lazy_init()  # the root's one-time setup first (no collective), so that it is not done in here
    saved = [(getattr(s, "_auto_reshard_after_forward", None), [g.post_forward_mesh_info for g in _param_groups(s)])
             for s in states]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield model
    finally:
        for state, (auto, infos) in zip(states, saved):
            if auto is not None:
                state._auto_reshard_after_forward = auto
            for group, info in zip(_param_groups(state), infos):
                group.post_forward_mesh_info = info
        for unit in units:
            unit.reshard()


def _param_groups(state: Any) -> list[Any]:
    """An FSDP2 unit's parameter groups: a list from torch 2.13, at most one group (or None) before."""
    if hasattr(state, "_fsdp_param_groups"):
        return list(state._fsdp_param_groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [] if group is None else [group]

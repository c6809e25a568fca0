"""The worker side: the processes beside the candidate (candidate, golden, fork server), its tripwires,
operator inventory, inputs and timing loop."""

"""``make demo`` (``python -m e2e.demo [--keep]``): the local control plane, our webhook and node
agents with mock GPUs, examples/ applied, and a table of what each workload got."""

"""10,000 GPUs by simulation (issue 26): admission, the viewer, the webhook's start and lifecycle.

Setup: one private control plane of the e2e tier (``e2e/cluster``), and on it a fleet grown in
steps of GPUs (``--steps``, default 1,000, 2,500 and 10,000: 125, 313 and 1,250 fake nodes of 8
cards of 80 GiB). Fake nodes are Node objects with no kubelet; each node's ResourceSlices are
what our node agent publishes, built by its own code (``node.slices.build_slices``). With them,
``--claims-per-gpu`` (default 2: 20,000 at 10,000 GPUs) ResourceClaims of our driver, written as
the translator writes a share (each a ``1/claims-per-gpu`` share of a card) and allocated
through the status subresource as the scheduler would allocate them, in 100 namespaces, one of
which, ``viewer-small``, holds 100 of them. Each step adds to the last; the objects are created
by 8 client threads, and creating them is not measured. Helpers: ``bench/scaling/``.

Measured at each step:

- part 4, the viewer: ``kubectl vgpu status -A`` (goal <= 5 s) and ``-n viewer-small`` (goal
  <= 1 s), run as the ``kubectl-vgpu`` plugin executable with the table output, ``--viewer-runs``
  times each: wall time from process start to exit (the interpreter's start and imports
  included, as a user waits for them), peak RSS (the kernel's ``ru_maxrss`` of that child), the
  shares the table shows (checked against the claims in view), and the LIST requests of claims,
  pods and slices as the API server counts them (``apiserver_request_total`` before and after;
  nothing else runs on this cluster), next to the pages a reading 500 items at a time makes: an
  unpaged list would show 1 where 4 are expected at 2,000 claims. ``-n`` reads every claim too
  (the cards' bookings count the whole cluster's), so it grows with the cluster as ``-A`` does.
- part 3, a webhook replica's start: the real webhook process (``vgpu-bridge webhook`` as the e2e
  tier starts it) from process start until /readyz answers 200 (its ResourceSlice cache holds
  the first full list; goal <= 5 s), ``--replica-starts`` times; its RSS (with its child
  process) then and 2 s later, when its other caches have listed too; and the LISTs it made.

- part 1, admission (``bench/scaling/admission.py``): the real webhook registered for one
  namespace holding a gpumem ResourceQuota and 5,000 claims; HAMi-style GPU pods created through
  the API server by the Go generator, paced (p50, p99; goal: p99 at the last step <= 1.2x the
  first, no LIST per admission) and closed loop (pods/s); the webhook's RSS (goal: <= 10 MB per
  1,000 GPUs), its CPU and API requests per pod. At the last step, 1, 2 and 4 replicas fed
  reviews straight from the generator, its connections spread over them.

At the last step only: part 3's template lifecycle (``--templates`` in ``--template-namespaces``:
the sweeper's first pass, its requests, the restorer) and part 5's dense node (``--dense-shares``
per card of one 8-card node, the real agent over its socket: Prepare and Unprepare bursts,
/metrics scrapes). Part 2, scheduling, is ``bench/schedule.py --gpu-steps`` (its own fresh
cluster per run); ``make bench-scale`` runs both.

Each table gives the slope, the least-squares cost per 1,000 GPUs over the steps.

Left out: no pods run (no kubelet), so the viewer's pod lists are one page and its holders
column is empty; no agent runs for the viewer, so it reads no agent's /metrics; kubectl itself,
which only finds and executes the plugin, is not in the wall time. The API server, etcd, the
viewer and the webhook share this machine's cores: read the figures with the load beside them.

``python bench/scale.py [--steps 1000,2500,10000] [--claims-per-gpu 2]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scaling.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], description=(__doc__ or "").split("\n")[0]))

"""Translation throughput on one core: the pure path (core.translate) and the CLI path (YAML in
and out). Target: at least 5,000 workloads/s on the pure path, so admission is never the
bottleneck. Prints a table; run with `make bench`."""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workloads import INVENTORY, make_workloads
from vgpu_bridge.cli import build_parser
from vgpu_bridge.core import TranslationContext, translate
from vgpu_bridge.manifests import dump_objects
from vgpu_bridge.translate_command import run

WORKLOADS = 1_000
ROUNDS = 5
TARGET_PER_S = 5_000


def pure_path() -> tuple[float, list[float]]:
    """Best-of-ROUNDS throughput, and per-workload latencies (µs) of the last round."""
    context = TranslationContext(inventory=INVENTORY)
    workloads = make_workloads(WORKLOADS)
    best, latencies = 0.0, list[float]()
    for _ in range(ROUNDS):
        latencies = []
        start = time.perf_counter()
        for obj in workloads:
            t0 = time.perf_counter()
            translate(obj, context=context)
            latencies.append((time.perf_counter() - t0) * 1e6)
        best = max(best, WORKLOADS / (time.perf_counter() - start))
    return best, latencies


def cli_path(tmp: Path) -> float:
    """Throughput of `vgpu-bridge translate` on one 1,000-document file, parse to print."""
    manifest = tmp / "workloads.yaml"
    manifest.write_text(dump_objects(make_workloads(WORKLOADS), output="yaml"))
    inventory = Path(__file__).resolve().parents[1] / "tests/data/inventory-two-sizes.yaml"
    args = build_parser().parse_args(
        ["translate", "-f", str(manifest), "--inventory", str(inventory)]
    )
    start = time.perf_counter()
    code = run(args, stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO())
    elapsed = time.perf_counter() - start
    assert code == 0, "the benchmark mix must translate"
    return WORKLOADS / elapsed


def main() -> int:
    import tempfile

    rate, latencies = pure_path()
    with tempfile.TemporaryDirectory() as tmp:
        cli_rate = cli_path(Path(tmp))
    q = statistics.quantiles(latencies, n=100)
    print(f"translate: {WORKLOADS} workloads (Pods and Deployments, realistic mix), one core")
    print(f"{'path':<28}{'workloads/s':>14}{'p50 µs':>10}{'p99 µs':>10}{'target':>12}")
    verdict = "ok" if rate >= TARGET_PER_S else "MISSED"
    print(
        f"{'core.translate (pure)':<28}{rate:>14,.0f}{q[49]:>10.1f}{q[98]:>10.1f}"
        f"{f'>={TARGET_PER_S:,} {verdict}':>12}"
    )
    print(f"{'vgpu-bridge translate (CLI)':<28}{cli_rate:>14,.0f}{'':>10}{'':>10}{'-':>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

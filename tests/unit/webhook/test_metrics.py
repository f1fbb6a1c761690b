"""The webhook's metrics are made (and prometheus_client imported) only by `load()` or the first
scrape; what admissions record before that is in the first scrape, none of it lost, also while
`load()` runs beside them."""

from __future__ import annotations

import threading

from prometheus_client import generate_latest

from vgpu_bridge.version import package_version
from vgpu_bridge.webhook import metrics as metrics_module
from vgpu_bridge.webhook.metrics import WebhookMetrics


def test_what_is_recorded_before_the_metrics_are_made_is_in_the_first_scrape() -> None:
    metrics = WebhookMetrics()
    metrics.admissions.labels("translated").inc()
    metrics.admissions.labels("translated").inc()
    metrics.admissions.labels("denied").inc()
    metrics.latency.observe(0.003)
    metrics.unreadable_slices.set_function(lambda: 4)
    registry = metrics.registry
    value = registry.get_sample_value
    assert value("vgpu_bridge_admissions_total", {"decision": "translated"}) == 2
    assert value("vgpu_bridge_admissions_total", {"decision": "denied"}) == 1
    assert value("vgpu_bridge_admission_duration_seconds_count") == 1
    assert value("vgpu_bridge_admission_duration_seconds_bucket", {"le": "0.005"}) == 1
    assert value("vgpu_bridge_inventory_unreadable_slices") == 4
    assert value("vgpu_bridge_events_dropped_total", {"reason": "queue-full"}) is None
    assert b"vgpu_bridge_admissions_total" in generate_latest(registry)


def test_once_made_records_go_to_the_real_metrics_and_load_makes_them_once() -> None:
    metrics = WebhookMetrics()
    registry = metrics.load()
    metrics.events_dropped.labels("queue-full").inc(3)
    metrics.templates_left_behind.set(2)
    assert metrics.load() is registry
    assert (
        registry.get_sample_value("vgpu_bridge_events_dropped_total", {"reason": "queue-full"}) == 3
    )
    assert registry.get_sample_value("vgpu_bridge_templates_left_behind") == 2


def test_no_count_is_lost_while_the_metrics_are_made_beside_admissions() -> None:
    metrics, threads, per_thread = WebhookMetrics(), 4, 5_000
    go = threading.Barrier(threads + 1)

    def admit() -> None:
        go.wait()
        for _ in range(per_thread):
            metrics.admissions.labels("unchanged").inc()

    workers = [threading.Thread(target=admit) for _ in range(threads)]
    for worker in workers:
        worker.start()
    go.wait()
    registry = metrics.load()  # while they count
    for worker in workers:
        worker.join()
    counted = registry.get_sample_value("vgpu_bridge_admissions_total", {"decision": "unchanged"})
    assert counted == threads * per_thread


def test_a_process_that_never_scrapes_keeps_a_bounded_number_of_calls() -> None:
    metrics = WebhookMetrics()
    for _ in range(metrics_module.MAX_PENDING + 10):
        metrics.latency.observe(0.001)
    assert metrics.latency._pending == []  # made once MAX_PENDING were kept
    count = metrics.registry.get_sample_value("vgpu_bridge_admission_duration_seconds_count")
    assert count == metrics_module.MAX_PENDING + 10


def test_the_registry_serves_the_build_and_the_process_series() -> None:
    registry = WebhookMetrics().load()
    assert registry.get_sample_value("vgpu_bridge_build_info", {"version": package_version()}) == 1
    assert (registry.get_sample_value("process_resident_memory_bytes") or 0) > 0
    assert b"python_info{" in generate_latest(registry)

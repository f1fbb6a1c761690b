"""Prometheus metrics of the webhook, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.admissions = Counter(
            "vgpu_bridge_admissions",
            "Admission reviews answered, by decision (translated, unchanged, denied, error)",
            ["decision"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "vgpu_bridge_admission_duration_seconds",
            "Time to answer one admission review",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
            registry=self.registry,
        )
        self.unreadable_slices = Gauge(
            "vgpu_bridge_inventory_unreadable_slices",
            "ResourceSlices of our driver skipped because their card memory cannot be read",
            registry=self.registry,
        )
        self.events_dropped = Counter(
            "vgpu_bridge_events_dropped",
            "Events about admissions not posted, by reason (queue-full, rate-limited, not-found, "
            "api-error)",
            ["reason"],
            registry=self.registry,
        )
        self.templates_left_behind = Gauge(
            "vgpu_bridge_templates_left_behind",
            "Our claim templates past the sweep grace that the last sweep did not keep or delete",
            registry=self.registry,
        )

"""Prometheus metrics of the webhook, in a registry of its own.

prometheus_client costs about 15 ms to import, a tenth of a restarted replica's time to its first
answer, and nothing needs it before the first scrape. So each metric is defined here by name and
made only by `WebhookMetrics.load()` (called in the background once the server is up, or by the
first scrape); what admissions record before that is kept and handed to the real metric, so no
count is lost. A new metric is one more `self._define(...)` line in `__init__`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

_Call = tuple[tuple[str, ...], str, tuple[Any, ...]]  # label values, method, arguments
MAX_PENDING = 10_000  # calls kept before the metrics are made; past it, they are made at once


class DeferredMetric:
    """A prometheus_client metric (Counter, Gauge, Histogram, …) before and after it is made:
    `labels(...)`, `inc`, `set`, `set_function`, `observe` are kept until `make`, then passed on.
    `load` makes every metric; it is called when MAX_PENDING calls are kept."""

    def __init__(
        self,
        lock: threading.Lock,
        load: Callable[[], object],
        kind: str,
        *args: Any,
        **options: Any,
    ) -> None:
        self._lock, self._load, self._kind = lock, load, kind
        self._args, self._options = args, options
        self._real: Any = None
        self._pending: list[_Call] = []

    def make(self, registry: CollectorRegistry) -> None:
        """Makes the real metric in `registry` and replays what was recorded (under the lock)."""
        import prometheus_client

        real = getattr(prometheus_client, self._kind)(*self._args, registry=registry,
                                                      **self._options)  # fmt: skip
        for values, method, args in self._pending:
            getattr(real.labels(*values) if values else real, method)(*args)
        self._pending.clear()
        self._real = real

    def labels(self, *values: str) -> _Labelled:
        return _Labelled(self, values)

    def inc(self, amount: float = 1) -> None:
        self.call((), "inc", amount)

    def set(self, value: float) -> None:
        self.call((), "set", value)

    def set_function(self, function: Callable[[], float]) -> None:
        self.call((), "set_function", function)

    def observe(self, amount: float) -> None:
        self.call((), "observe", amount)

    def call(self, values: tuple[str, ...], method: str, *args: Any) -> None:
        real = self._real
        if real is None and self._kept((values, method, args)):
            return
        real = self._real
        getattr(real.labels(*values) if values else real, method)(*args)

    def _kept(self, call: _Call) -> bool:
        """Keeps `call` for `make` unless the metric is made by now; True when kept."""
        with self._lock:
            if self._real is not None:
                return False
            self._pending.append(call)
            full = len(self._pending) >= MAX_PENDING
        if full:
            self._load()
        return True


class _Labelled:
    """One child of a labelled metric (`metric.labels(...)`)."""

    def __init__(self, metric: DeferredMetric, values: tuple[str, ...]) -> None:
        self._metric, self._values = metric, values

    def inc(self, amount: float = 1) -> None:
        self._metric.call(self._values, "inc", amount)

    def set(self, value: float) -> None:
        self._metric.call(self._values, "set", value)

    def observe(self, amount: float) -> None:
        self._metric.call(self._values, "observe", amount)


class WebhookMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._defined: list[DeferredMetric] = []
        self._registry: CollectorRegistry | None = None
        self.admissions = self._define(
            "Counter",
            "vgpu_bridge_admissions",
            "Admission reviews answered, by decision (translated, unchanged, denied, error)",
            ["decision"],
        )
        self.latency = self._define(
            "Histogram",
            "vgpu_bridge_admission_duration_seconds",
            "Time to answer one admission review",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
        )
        self.unreadable_slices = self._define(
            "Gauge",
            "vgpu_bridge_inventory_unreadable_slices",
            "ResourceSlices of our driver skipped because their card memory cannot be read",
        )
        self.events_dropped = self._define(
            "Counter",
            "vgpu_bridge_events_dropped",
            "Events about admissions not posted, by reason (queue-full, rate-limited, not-found, "
            "api-error)",
            ["reason"],
        )
        self.shed = self._define(
            "Counter",
            "vgpu_bridge_requests_shed",
            "Requests answered without being computed, by reason (queue-full: refused with 503 "
            "by the full worker queue; expired: their caller's timeout passed while queued, 504)",
            ["reason"],
        )
        self.templates_left_behind = self._define(
            "Gauge",
            "vgpu_bridge_templates_left_behind",
            "Our claim templates past the sweep grace that the last sweep did not keep or delete",
        )

    def _define(self, kind: str, *args: Any, **options: Any) -> DeferredMetric:
        """A prometheus_client metric of class `kind`, made by `load` with these arguments."""
        metric = DeferredMetric(self._lock, self.load, kind, *args, **options)
        self._defined.append(metric)
        return metric

    def load(self) -> CollectorRegistry:
        """Imports prometheus_client and makes every metric (once); returns their registry. The
        import happens outside the lock: admissions keep recording meanwhile, never waiting."""
        from prometheus_client import CollectorRegistry

        from vgpu_bridge.build_info import register_standard

        with self._lock:
            if self._registry is None:
                registry = CollectorRegistry()
                register_standard(registry)
                for metric in self._defined:
                    metric.make(registry)
                self._registry = registry
            return self._registry

    @property
    def registry(self) -> CollectorRegistry:
        return self.load()

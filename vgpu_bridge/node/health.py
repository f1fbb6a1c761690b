"""The agent's `/healthz`, served next to `/metrics`: 200 only while the agent really works.

It answers 503 with a one-line JSON reason when
- a kubelet-plugin socket (DRA or registration) is gone, or no gRPC server answers on it;
- no publication has succeeded for longer than the resync period plus a grace
  (`--health-grace-seconds`, default 120 s), counted from the agent's start until the first one
  succeeds, then from the last one. A failed publication alone is not a reason: the next resync
  tries again, and restarting the agent during a short API-server outage would only take the
  kubelet plugin away; failures that last past the grace (a wedged client, a revoked
  credential) are, and the reason names the last error. A stuck publisher is caught the same way;
- a step of the sweep of container-writable dirs (`claimdirs.TenantDirs`: the trash, the
  priority dir, the claim dirs' sizes) has not succeeded for MAX_SWEEP_SILENCE_S (300 s, 10
  sweeps), counted the same way; a step that keeps raising and one that hangs look alike. What
  a step could not delete (an entry the kernel refuses to remove) is no reason: restarting would
  not remove it either; it is counted (`vgpu_bridge_tenant_entries_not_deleted_total`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.claimdirs import MAX_SWEEP_SILENCE_S, SweepStep
from vgpu_bridge.node.publisher import Publication

HEALTHZ = "/healthz"
log = get_logger("vgpu_bridge.node.health")


class Health:
    def __init__(
        self,
        *,
        sockets: Callable[[], str | None],
        publications: Callable[[], Publication | None],
        max_silence_s: float,
        sweep_steps: Callable[[], Mapping[str, SweepStep]] = dict,
        max_sweep_silence_s: float = MAX_SWEEP_SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`sockets`: why the gRPC servers do not serve, or None; `publications`: how the last
        publication ended (None before the first); `sweep_steps`: how each step of the sweep
        went (`TenantDirs.steps`); `clock` must be the publisher's and the sweeper's."""
        self._sockets = sockets
        self._publications = publications
        self._max_silence_s = max_silence_s
        self._sweep_steps = sweep_steps
        self._max_sweep_silence_s = max_sweep_silence_s
        self._clock = clock
        self._started_at = clock()

    def problem(self) -> str | None:
        """Why the agent is unhealthy, or None when it is healthy."""
        trouble = self._sockets()
        if trouble is not None:
            return trouble
        return self._unpublished() or self._stuck_sweep_step()

    def _unpublished(self) -> str | None:
        last = self._publications()
        succeeded_at = None if last is None else last.succeeded_at
        silent = self._clock() - (self._started_at if succeeded_at is None else succeeded_at)
        if silent > self._max_silence_s:
            since = "since the agent started" if succeeded_at is None else "since the last one"
            error = "" if last is None or last.error is None else f"; last error: {last.error}"
            return (
                f"no ResourceSlice publication has succeeded for {silent:.0f} s {since} "
                f"(allowed: {self._max_silence_s:g} s){error}"
            )
        return None

    def _stuck_sweep_step(self) -> str | None:
        for name, step in sorted(self._sweep_steps().items()):
            silent = step.silent_for(now=self._clock(), started_at=self._started_at)
            if silent > self._max_sweep_silence_s:
                error = "" if step.error is None else f"; last error: {step.error}"
                return (
                    f"the sweep's {name} step has not succeeded for {silent:.0f} s "
                    f"(allowed: {self._max_sweep_silence_s:g} s; {step.failures} failures){error}"
                )
        return None


def with_healthz(
    app: WSGIApplication,
    health: Health | None,
    *,
    details: Callable[[], Mapping[str, str]] = dict,
) -> WSGIApplication:
    """`app` with `/healthz` answered by `health` (None: always healthy); a healthy answer also
    carries `details()` (e.g. why an agent without a GPU waits, `no_gpu.py`)."""

    def dispatch(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTHZ:
            return app(environ, start_response)
        problem = None if health is None else health.problem()
        if problem is None:
            status, answer = "200 OK", {"status": "ok", **details()}
        else:
            log.warning("unhealthy", reason=problem)
            status, answer = "503 Service Unavailable", {"status": "unhealthy", "reason": problem}
        body = json.dumps(answer).encode() + b"\n"
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(status, headers)
        return [body]

    return dispatch

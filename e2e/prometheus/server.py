"""A real Prometheus on a free 127.0.0.1 port, over a generated config: static targets for the
node agents (each with its node as a `node` label, as the chart's monitors relabel it) and the
webhooks, under the job names the alert rules select on, scraped and evaluated every second."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.node.agent import free_port
from e2e.processes import stop_process
from e2e.waiting import wait_for

AGENT_JOB = "vgpu-bridge-agent"
WEBHOOK_JOB = "vgpu-bridge-webhook"
Json = dict[str, Any]


class PrometheusQueryError(RuntimeError):
    """Prometheus refused a query; the message names the query and its error."""


def config(
    *, agents: Mapping[str, str], webhooks: Sequence[str], rule_files: Sequence[Path]
) -> Json:
    """`agents`: host:port -> node name; `webhooks`: host:port of their metrics listeners."""
    every_second = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    agent_targets = [
        {"targets": [target], "labels": {"node": node}} for target, node in agents.items()
    ]
    return {
        "global": every_second,
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": AGENT_JOB, "honor_labels": True, "static_configs": agent_targets},
            {"job_name": WEBHOOK_JOB, "static_configs": [{"targets": list(webhooks)}]},
        ],
    }


@dataclass(frozen=True)
class PrometheusServer:
    port: int
    log_file: Path

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            body = error.read()
            try:
                answer = json.loads(body)
            except ValueError:  # e.g. 503 "Service Unavailable" while it is starting
                raise PrometheusQueryError(f"{path}: HTTP {error.code}: {body[:200]!r}") from None
        if answer.get("status") != "success":
            raise PrometheusQueryError(f"{path} {params}: {answer.get('error', answer)}")
        return answer["data"]

    def query(self, expr: str) -> list[Json]:
        """The instant vector `expr` evaluates to now."""
        result: list[Json] = self.api("query", query=expr)["result"]
        return result

    def firing(self, alert: str) -> list[Json]:
        alerts: list[Json] = self.api("alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == alert and a["state"] == "firing"]

    def targets_up(self) -> dict[str, str]:
        """scrape URL -> health ("up", "down" or "unknown") of every active target."""
        active = self.api("targets", state="active")["activeTargets"]
        return {t["scrapeUrl"]: t["health"] for t in active}

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""


@contextmanager
def running_prometheus(binary: Path, workdir: Path, settings: Json) -> Iterator[PrometheusServer]:
    """Prometheus with `settings` as its config (see `config`), its data in `workdir`; ready (its
    rules loaded) when yielded, stopped after."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    server = PrometheusServer(free_port(), workdir / "prometheus.log")
    command = [
        str(binary), f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{server.port}", "--storage.tsdb.retention.time=1h",
    ]  # fmt: skip
    with server.log_file.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        rules = bool(settings.get("rule_files"))
        wait_for(lambda: _ready(server, process, rules=rules), timeout_s=60, what="prometheus")
        yield server
    finally:
        stop_process(process, grace_s=15)


def _ready(server: PrometheusServer, process: subprocess.Popen[bytes], *, rules: bool) -> bool:
    """Serving its API, with its rule groups loaded when it has rule files."""
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited {process.returncode}:\n{server.log()[-3000:]}")
    try:
        return bool(server.api("rules")["groups"]) or not rules
    except (OSError, PrometheusQueryError):
        return False

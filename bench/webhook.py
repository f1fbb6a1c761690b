"""Admission latency and throughput of `vgpu-bridge webhook` over TLS on loopback.

The webhook runs as its own process (as in a cluster); clients hold keep-alive connections, as
the API server does. Requests are dry-run AdmissionReviews of a realistic mix, which is the
steady state of a real webhook: once a template exists, admitting another pod of its shape makes
no API call. Targets on 2 cores: p99 <= 15 ms at 200 admissions/s, and >= 800 admissions/s at
saturation. Further rows: the same paced load while 1,000 slow connections are held open (each
dribbling a partial request, reopened whenever the webhook cuts it), pods without GPUs per
second next to a Go webhook doing the same under the same load (`bench/goref/`: Go's standard
library, built into the cache), and the time from process start to the answer to a first review
that core translates (a GPU Deployment), installed as the image installs it (a wheel, pip-installed
with its bytecode compiled). A flood row (issue 25): another namespace's GPU admissions, paced,
while 24 clients send dry runs of a 5,000-container GPU pod, next to the same admissions on a quiet
webhook (goal: p99 <= 3x the quiet one, none failed), and the webhook's RSS after the flood next
to its idle RSS before it (goal <= 1.5x). A bodiless row (issue 35): the same paced GPU
admissions while 300 connections loop `GET /metrics` (goal: none refused, p99 <= 3x quiet).
`--ab TREE` (issue 35) measures instead, against the checkout in TREE (an older commit, e.g. a
`git worktree` of 139832e), pods without GPUs and GPU pods at saturation and the server's CPU per
review, both versions one after the other in each of 3 rounds (goal: >= 0.95x throughput and
<= 1.05x CPU per review on both paths); `--only bodiless` runs the bodiless row alone.

The load comes from a Go generator (`bench/goload/`, built into the cache): HTTP/1.1 keep-alive,
closed loop (saturation) or open loop (paced rows: latency counted from each review's scheduled
send), reporting its own CPU time, which the table shows: a Python generator was the bottleneck
(issue 25: its "pods without GPUs" row read 0.90-1.05x of Go's where a Go generator measured
0.38-0.53x). Run with `make bench`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.goref import go_load_generator, go_reference_webhook
from bench.workloads import make_workloads
from tests.tls import write_self_signed

REPO = Path(__file__).resolve().parents[1]

PACED_RATE, PACED_SECONDS, PACED_CONNECTIONS = 200, 10, 4
FLOOD_CLIENTS, FLOOD_CONTAINERS, FLOOD_SECONDS = 24, 5_000, 12
BODILESS_CONNECTIONS, BODILESS_TARGET, BODILESS_ROUNDS = 300, "/metrics", 3
AB_ROUNDS = 3
NEIGHBOUR_RATE, NEIGHBOUR_SECONDS = 20, 10
TARGET = "/mutate?timeout=10s"  # as the API server sends it (a webhook's default timeoutSeconds)
SATURATION_SECONDS, SATURATION_CONNECTIONS = 6, 8
SLOW_CONNECTIONS = 1_000
START_RUNS = 15
# A kubeconfig whose API server does not answer: the benchmark admits without API calls.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def review_of(index: int, obj: dict[str, Any], *, dry_run: bool = True) -> bytes:
    request = {
        "uid": f"uid-{index}",
        "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
        "operation": "CREATE",
        "namespace": obj["metadata"]["namespace"],
        "object": obj,
        "dryRun": dry_run,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


def plain_pod_reviews(count: int) -> list[bytes]:
    """Pods that ask for no GPU, as most pods of a cluster do (not dry runs: they need no API)."""
    bodies = []
    for index in range(count):
        container = {
            "name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 8080}],
            "env": [{"name": f"SETTING_{i}", "value": str(i)} for i in range(8)],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                          "limits": {"cpu": "1", "memory": "512Mi"}},
        }  # fmt: skip
        meta = {"name": f"web-{index}", "namespace": f"team-{index % 7}",
                "labels": {"app": "web", "tier": "frontend"}}  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
            "containers": [container], "serviceAccountName": "web"}}  # fmt: skip
        bodies.append(review_of(index, pod, dry_run=False))
    return bodies


def reviews(count: int) -> list[bytes]:
    workloads = (w for w in make_workloads(count) if "gpu-fraction" not in str(w))
    return [review_of(index, obj) for index, obj in enumerate(workloads)]


def start_webhook(
    workdir: Path, port: int, *, program: Sequence[str] = (), tree: Path | None = None
) -> subprocess.Popen[bytes]:
    """`vgpu-bridge webhook` (`program`, or `python -m vgpu_bridge.cli` of this checkout's venv;
    run from `workdir` so that the checkout is not on its path; of the checkout in `tree`, ahead
    of this one on the path, when given) with an API server that never answers."""
    cert, key = workdir / "tls.crt", workdir / "tls.key"
    if not cert.exists():
        write_self_signed(workdir)
    (workdir / "kubeconfig").write_text(KUBECONFIG)
    command = [
        *(program or (sys.executable, "-m", "vgpu_bridge.cli")), "webhook",
        "--listen", f"127.0.0.1:{port}",
        "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--kubeconfig", str(workdir / "kubeconfig"), "--sweep-interval-seconds", "3600",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree is not None else None
    return subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


class Client:
    def __init__(self, port: int, cafile: Path, *, context: ssl.SSLContext | None = None) -> None:
        context = context or ssl.create_default_context(cafile=str(cafile))
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go clients do

    def admit(self, body: bytes) -> float:
        start = time.perf_counter()
        self.answer(body)
        return time.perf_counter() - start

    def answer(self, body: bytes) -> dict[str, Any]:
        self.conn.request(
            "POST", "/mutate", body=body, headers={"Content-Type": "application/json"}
        )
        response = self.conn.getresponse()
        data = response.read()
        assert response.status == 200, response.status
        answer: dict[str, Any] = json.loads(data)["response"]
        return answer


@dataclass(frozen=True)
class Load:
    """What the Go load generator reports."""

    rate: float  # answers per second
    p50_ms: float
    p99_ms: float
    max_ms: float
    sent: int
    statuses: dict[str, int]  # answers by HTTP status ("error": none)
    generator_cpu: float  # the generator's CPU seconds per second: cores it kept busy
    first_errors: list[str]

    @property
    def failed(self) -> int:
        return self.sent - self.statuses.get("200", 0)


def write_bodies(path: Path, bodies: list[bytes]) -> Path:
    """One review per line, as the generator reads them (json.dumps writes no raw newline)."""
    path.write_bytes(b"\n".join(bodies) + b"\n")
    return path


def load_command(
    port: int, cafile: Path, bodies: Path, *, connections: int, seconds: float, rate: float | None
) -> list[str]:
    return [str(go_load_generator()), "--url", f"https://127.0.0.1:{port}{TARGET}",
            "--cafile", str(cafile), "--bodies", str(bodies), "--conns", str(connections),
            "--duration", f"{seconds}s", "--rate", str(rate or 0)]  # fmt: skip


def get_command(
    port: int, cafile: Path, target: str, *, connections: int, seconds: float
) -> list[str]:
    """Bodiless GETs of `target` over `connections`, each as fast as it is answered."""
    return [str(go_load_generator()), "--method", "GET", "--url",
            f"https://127.0.0.1:{port}{target}", "--cafile", str(cafile),
            "--conns", str(connections), "--duration", f"{seconds}s"]  # fmt: skip


def run_load(
    port: int, cafile: Path, bodies: Path, *, connections: int, seconds: float, rate: float | None
) -> Load:
    """Reviews from `bodies` over `connections` for `seconds`; `rate` None: as fast as they are
    answered (closed loop), else scheduled at `rate` per second (open loop)."""
    command = load_command(port, cafile, bodies, connections=connections, seconds=seconds,
                           rate=rate)  # fmt: skip
    return finished_load(subprocess.Popen(command, stdout=subprocess.PIPE))


def finished_load(process: subprocess.Popen[bytes]) -> Load:
    out, _ = process.communicate(timeout=600)
    if process.returncode != 0:
        raise RuntimeError(f"the load generator failed ({process.returncode})")
    report = json.loads(out)
    return Load(report["rate"], report["p50_ms"], report["p99_ms"], report["max_ms"],
                report["sent"], report["statuses"], report["cpu_seconds"] / report["seconds"],
                report["first_errors"] or [])  # fmt: skip


def wait_until_serving(port: int, cafile: Path) -> None:
    for _ in range(100):
        try:
            Client(port, cafile).conn.request("GET", "/healthz")
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the webhook did not start")


class SlowClients:
    """`count` loopback connections that each send a byte of a request head every second and
    are reopened whenever the webhook closes them, until `stop()`."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=1)
        except OSError:
            return None
        sock.setblocking(False)
        return sock

    def _hold(self) -> None:
        held: list[socket.socket | None] = [self._open() for _ in range(self.count)]
        while not self._stop.wait(1.0):
            for index, sock in enumerate(held):
                try:
                    if sock is None:
                        raise OSError
                    sock.send(b"P")
                except OSError:
                    if sock is not None:
                        sock.close()
                    held[index] = self._open()
        for sock in held:
            if sock is not None:
                sock.close()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plain_load(pid: int, port: int, cafile: Path, bodies: Path) -> tuple[Load, float]:
    """Pods without GPUs at saturation, and the server's CPU seconds per review meanwhile."""
    before = cpu_seconds(pid)
    load = run_load(port, cafile, bodies, connections=SATURATION_CONNECTIONS,
                    seconds=SATURATION_SECONDS, rate=None)  # fmt: skip
    return load, (cpu_seconds(pid) - before) / max(1, load.sent)


def rss_mb(pid: int) -> float:
    """The resident memory of process `pid` and of its children (the webhook's prevalidating
    child is part of the replica)."""
    total = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            total += int(line.split()[1]) / 1024
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        total += sum(rss_mb(int(child)) for child in tasks.read_text().split())
    return total


def gpu_pod_reviews(count: int, *, namespace: str, containers: int = 1) -> list[bytes]:
    """Dry runs of GPU pods in `namespace` (dry: the benchmark's API server never answers),
    each with `containers` containers asking for a GPU share."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    bodies = []
    for index in range(count):
        spec = {
            "containers": [
                {"name": f"c{i}", "image": "cuda:12", "resources": {"limits": limits}}
                for i in range(containers)
            ]
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"gpu-{index}", "namespace": namespace},
            "spec": spec,
        }
        bodies.append(review_of(index, pod))  # fmt: skip
    return bodies


@dataclass(frozen=True)
class FloodResult:
    quiet: Load  # the neighbour's paced GPU admissions alone
    flooded: Load  # the same while the flood runs
    flood: Load  # the flood's own answers
    flood_review_bytes: int
    idle_rss_mb: float  # before the flood, after the warm-up
    after_rss_mb: float  # once the flood is over


def flood_rows(pid: int, port: int, cafile: Path, workdir: Path) -> FloodResult:
    """The neighbour's GPU admissions, quiet and then while FLOOD_CLIENTS send dry runs of a
    FLOOD_CONTAINERS-container GPU pod; the webhook's RSS before and after."""
    neighbour = write_bodies(workdir / "neighbour.jsonl",
                             gpu_pod_reviews(200, namespace="neighbour"))  # fmt: skip
    big = gpu_pod_reviews(1, namespace="flood", containers=FLOOD_CONTAINERS)
    flood_bodies = write_bodies(workdir / "flood.jsonl", big)
    paced = {"connections": 1, "seconds": NEIGHBOUR_SECONDS, "rate": NEIGHBOUR_RATE}
    quiet = run_load(port, cafile, neighbour, **paced)
    time.sleep(2)  # the quiet load's garbage gone
    idle = rss_mb(pid)
    command = load_command(port, cafile, flood_bodies, connections=FLOOD_CLIENTS,
                           seconds=FLOOD_SECONDS, rate=None)  # fmt: skip
    flooding = subprocess.Popen(command, stdout=subprocess.PIPE)
    time.sleep(1)  # the flood under way
    flooded = run_load(port, cafile, neighbour, **paced)
    flood = finished_load(flooding)
    time.sleep(2)
    return FloodResult(quiet, flooded, flood, len(big[0]), idle, rss_mb(pid))


@dataclass(frozen=True)
class BodilessResult:
    quiet: list[Load]  # the neighbour's paced GPU admissions alone, a round each
    flooded: list[Load]  # the same while the GETs loop
    flood: list[Load]  # the GETs' own answers


def bodiless_rows(port: int, cafile: Path, workdir: Path) -> BodilessResult:
    """The neighbour's GPU admissions, quiet and then while BODILESS_CONNECTIONS loop bodiless
    GETs of BODILESS_TARGET (issue 35: scrapes from the pod network got reviews refused), in
    BODILESS_ROUNDS rounds (a p99 of 200 admissions on this shared machine moves by 5x between
    quiet runs: the median of the rounds is compared)."""
    neighbour = write_bodies(workdir / "neighbour.jsonl",
                             gpu_pod_reviews(200, namespace="neighbour"))  # fmt: skip
    paced = {"connections": 1, "seconds": NEIGHBOUR_SECONDS, "rate": NEIGHBOUR_RATE}
    found = BodilessResult([], [], [])
    for _ in range(BODILESS_ROUNDS):
        found.quiet.append(run_load(port, cafile, neighbour, **paced))
        command = get_command(port, cafile, BODILESS_TARGET, connections=BODILESS_CONNECTIONS,
                              seconds=NEIGHBOUR_SECONDS + 2)  # fmt: skip
        flooding = subprocess.Popen(command, stdout=subprocess.PIPE)
        time.sleep(1)  # the flood under way
        found.flooded.append(run_load(port, cafile, neighbour, **paced))
        found.flood.append(finished_load(flooding))
    return found


def bodiless_lines(result: BodilessResult) -> list[str]:
    lines = []
    for index, (quiet, flooded, flood) in enumerate(
        zip(result.quiet, result.flooded, result.flood, strict=True)
    ):
        statuses = ", ".join(f"{n:,} HTTP {s}" for s, n in sorted(flood.statuses.items()))
        lines += [
            row(f"round {index + 1}: neighbour GPU pods, {NEIGHBOUR_RATE}/s", quiet, "quiet"),
            row(f"  same, {BODILESS_CONNECTIONS} conns looping GET {BODILESS_TARGET}", flooded,
                f"{flooded.p99_ms / quiet.p99_ms:.1f}x quiet p99"),
            row(f"  the GETs of {BODILESS_TARGET}", flood, "anything"),
            f"  (the GETs' answers: {statuses})",
        ]  # fmt: skip
    quiet_p99 = sorted(q.p99_ms for q in result.quiet)[len(result.quiet) // 2]
    flooded_p99 = sorted(f.p99_ms for f in result.flooded)[len(result.flooded) // 2]
    failed = sum(f.failed for f in result.flooded)
    lines.append(
        f"{'neighbour p99, median of the rounds (ms)':<44}{'':>12}{quiet_p99:>9.2f}"
        f"{flooded_p99:>9.2f}{failed:>8}{'':>8}"
        f"{f'0 failed, <= 3x ({flooded_p99 / quiet_p99:.1f}x)':>26}"
    )
    lines.append("  (ms: quiet, then flooded; failed: the flooded rounds' failures together)")
    return lines


def go_reference_rate(workdir: Path, port: int, bodies: Path) -> tuple[Load, float]:
    """Pods without GPUs against the Go reference webhook, on the same certificate and load."""
    command = [str(go_reference_webhook()), "--listen", f"127.0.0.1:{port}",
               "--tls-cert-file", str(workdir / "tls.crt"),
               "--tls-key-file", str(workdir / "tls.key")]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cafile = workdir / "tls.crt"
        wait_until_serving(port, cafile)
        run_load(port, cafile, bodies, connections=2, seconds=1, rate=None)  # warm up
        return plain_load(process.pid, port, cafile, bodies)
    finally:
        process.terminate()
        process.wait(timeout=10)


@dataclass(frozen=True)
class Saturation:
    """One version's saturation rows: pods without GPUs and GPU pods (the translated mix), each
    with the server's CPU seconds per review meanwhile."""

    plain: Load
    plain_cpu: float
    gpu: Load
    gpu_cpu: float


def saturation_of(
    workdir: Path, port: int, mix: Path, plain: Path, tree: Path | None
) -> Saturation:
    """A fresh webhook of `tree` (None: this checkout), warmed up, at saturation on both paths."""
    process = start_webhook(workdir, port, tree=tree)
    try:
        cafile = workdir / "tls.crt"
        wait_until_serving(port, cafile)
        for bodies in (mix, plain):
            run_load(port, cafile, bodies, connections=2, seconds=1, rate=None)  # warm up
        plain_rate, plain_cpu = plain_load(process.pid, port, cafile, plain)
        gpu_rate, gpu_cpu = plain_load(process.pid, port, cafile, mix)
        return Saturation(plain_rate, plain_cpu, gpu_rate, gpu_cpu)
    finally:
        process.terminate()
        process.wait(timeout=10)


def ab_rounds(workdir: Path, port: int, old_tree: Path) -> dict[str, list[Saturation]]:
    """AB_ROUNDS rounds of both versions one after the other, the order swapped every round (the
    shared machine's pace drifts): {"old": [...], "new": [...]}."""
    mix = write_bodies(workdir / "mix.jsonl", reviews(1_000))
    plain = write_bodies(workdir / "plain.jsonl", plain_pod_reviews(1_000))
    write_self_signed(workdir)
    found: dict[str, list[Saturation]] = {"old": [], "new": []}
    for index in range(AB_ROUNDS):
        order = [("old", old_tree), ("new", None)]
        for name, tree in order if index % 2 == 0 else order[::-1]:
            found[name].append(saturation_of(workdir, port, mix, plain, tree))
    return found


def ab_lines(found: dict[str, list[Saturation]], old_name: str) -> list[str]:
    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    lines = [f"{'A/B at saturation, ' + str(SATURATION_CONNECTIONS) + ' conns':<44}"
             f"{'old/s':>10}{'new/s':>10}{'ratio':>8}{'old µs':>9}{'new µs':>9}{'ratio':>8}"
             f"{'target':>22}"]  # fmt: skip
    paths = (("pods without GPUs", "plain"), ("GPU pods (translated mix)", "gpu"))
    for title, path in paths:
        for index, (old, new) in enumerate(zip(found["old"], found["new"], strict=True)):
            lines.append(_ab_line(f"  {title}, round {index + 1}", old, new, path, ""))
        rates = {v: median([getattr(s, path).rate for s in found[v]]) for v in found}
        cpus = {v: median([getattr(s, f"{path}_cpu") for s in found[v]]) for v in found}
        lines.append(
            f"{'  ' + title + ', median':<44}{rates['old']:>10,.0f}{rates['new']:>10,.0f}"
            f"{rates['new'] / rates['old']:>8.2f}{cpus['old'] * 1e6:>9.0f}{cpus['new'] * 1e6:>9.0f}"
            f"{cpus['new'] / cpus['old']:>8.2f}{'>= 0.95x, <= 1.05x':>22}"
        )
    lines.append(f"  (old: {old_name}; new: this checkout; µs: the webhook's CPU per review, "
                 "its main process)")  # fmt: skip
    return lines


def _ab_line(title: str, old: Saturation, new: Saturation, path: str, target: str) -> str:
    old_load, new_load = getattr(old, path), getattr(new, path)
    old_cpu, new_cpu = getattr(old, f"{path}_cpu"), getattr(new, f"{path}_cpu")
    return (f"{title:<44}{old_load.rate:>10,.0f}{new_load.rate:>10,.0f}"
            f"{new_load.rate / old_load.rate:>8.2f}{old_cpu * 1e6:>9.0f}{new_cpu * 1e6:>9.0f}"
            f"{new_cpu / old_cpu:>8.2f}{target:>22}")  # fmt: skip


def installed_program(workdir: Path) -> tuple[Path, Path]:
    """A Python with `vgpu_bridge` installed as the image installs it, and the `vgpu-bridge`
    console script that pip wrote (the image's entrypoint, run by that Python): a wheel of this
    checkout, pip-installed (which compiles its modules' bytecode), in a venv of its own. The
    packages it needs come from this checkout's venv through a path line, which runs none of the
    .pth files there: the editable install's import finder, which this checkout's venv runs at
    every start (~10 ms), is not in the image and is not run here either."""
    venv, wheels = workdir / "installed", workdir / "wheels"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    site_dir = Path(
        subprocess.run(purelib, capture_output=True, text=True, check=True).stdout.strip()
    )
    (site_dir / "bench-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--quiet"]
    quiet_pip([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels),
               str(REPO)])  # fmt: skip
    (wheel,) = wheels.glob("vgpu_bridge-*.whl")
    quiet_pip([*pip, "install", "--no-deps", "--target", str(site_dir), str(wheel)])
    return python, site_dir / "bin" / "vgpu-bridge"


def quiet_pip(command: list[str]) -> None:
    """Run pip; its output (setuptools' warnings) is shown only when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def first_review_seconds(workdir: Path, body: bytes, program: Sequence[str]) -> float:
    """From `Popen` to the answer to `body`, a GPU review that core translates (connection
    attempts every 5 ms): a restarted replica's time to its first real admission."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cafile = workdir / "tls.crt"
    context = ssl.create_default_context(cafile=str(cafile))  # once: polling costs little CPU
    start = time.perf_counter()
    process = start_webhook(workdir, port, program=program)
    try:
        while True:
            try:
                answer = Client(port, cafile, context=context).answer(body)
                elapsed = time.perf_counter() - start
                break
            except OSError:
                time.sleep(0.005)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert answer["allowed"], answer
    assert answer.get("patch"), answer  # translated, not passed through
    return elapsed


def start_times(workdir: Path, body: bytes) -> tuple[list[float], list[float]]:
    """Process start to the first answer, as installed in the image, and the bare interpreter's
    start (`python -c pass`, the same venv) in turn with it: once to warm the page cache, then
    `START_RUNS` times each, sorted. The bare start shows how fast the machine was meanwhile:
    on this shared 2-core host it varies by half between quiet hours."""
    python, script = installed_program(workdir)
    program = (str(python), str(script))
    first_review_seconds(workdir, body, program)
    starts, bare = [], []
    for _ in range(START_RUNS):
        starts.append(first_review_seconds(workdir, body, program))
        began = time.perf_counter()
        subprocess.run([str(python), "-c", "pass"], cwd=workdir, check=True)
        bare.append(time.perf_counter() - began)
    return sorted(starts), sorted(bare)


def row(name: str, load: Load, target: str) -> str:
    failed = f"{load.failed:,}" if load.failed else "-"
    return (f"{name:<44}{load.rate:>12,.0f}{load.p50_ms:>9.2f}{load.p99_ms:>9.2f}"
            f"{failed:>8}{load.generator_cpu:>8.2f}{target:>26}")  # fmt: skip


def start_row(name: str, starts: list[float], target: str) -> str:
    median, slowest = starts[len(starts) // 2] * 1e3, starts[-1] * 1e3
    return f"{name:<44}{'':>12}{median:>9.0f}{slowest:>9.0f}{'':>16}{target:>26}"


def flood_lines(result: FloodResult) -> list[str]:
    quiet, flooded, flood = result.quiet, result.flooded, result.flood
    ratio = flooded.p99_ms / quiet.p99_ms if quiet.p99_ms else float("inf")
    statuses = ", ".join(f"{n:,} HTTP {s}" for s, n in sorted(flood.statuses.items()))
    return [
        row(f"neighbour GPU pods, paced {NEIGHBOUR_RATE}/s, quiet", quiet, "reference"),
        row(f"  same, {FLOOD_CLIENTS} clients flooding", flooded,
            f"p99 <= 3x quiet ({ratio:.1f}x)"),
        row(f"  the flood: {FLOOD_CONTAINERS:,}-container dry runs", flood, "refused fast"),
        f"  (flood review {result.flood_review_bytes / 1e6:.2f} MB; its answers: {statuses})",
        f"{'webhook RSS after the flood (MB)':<44}{'':>12}{result.idle_rss_mb:>9.0f}"
        f"{result.after_rss_mb:>9.0f}{'':>16}{'<= 1.5x idle':>26}",
        f"  (MB: idle before the flood, then 2 s after it: "
        f"{result.after_rss_mb / result.idle_rss_mb:.2f}x)",
    ]  # fmt: skip


HEADER = (f"{'load':<44}{'admissions/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'failed':>8}"
          f"{'gen CPU':>8}{'target':>26}")  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bodiless_only(tree: Path | None) -> int:
    """The bodiless row alone, on a fresh webhook of this checkout (or of `tree`)."""
    port = free_port()
    go_load_generator()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        process = start_webhook(workdir, port, tree=tree)
        try:
            cafile = workdir / "tls.crt"
            wait_until_serving(port, cafile)
            result = bodiless_rows(port, cafile, workdir)
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(HEADER)
    for line in bodiless_lines(result):
        print(line)
    return 0


def ab_only(old_tree: Path) -> int:
    """The A/B rows against the checkout in `old_tree`."""
    port = free_port()
    go_load_generator()
    described = ["git", "-C", str(old_tree), "log", "-1", "--format=%h"]
    old_name = subprocess.run(described, capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        found = ab_rounds(Path(tmp), port, old_tree)
    for line in ab_lines(found, old_name):
        print(line)
    return 0


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=["bodiless"], help="run this row alone")
    parser.add_argument("--ab", type=Path, metavar="TREE", help="A/B against this checkout")
    parser.add_argument("--tree", type=Path, help="with --only: the webhook of this checkout")
    options = parser.parse_args(argv)
    if options.ab is not None:
        return ab_only(options.ab)
    if options.only == "bodiless":
        return bodiless_only(options.tree)
    port = free_port()
    go_load_generator()  # built before anything is timed
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bodies = write_bodies(workdir / "mix.jsonl", reviews(1_000))
        plain = write_bodies(workdir / "plain.jsonl", plain_pod_reviews(1_000))
        process = start_webhook(workdir, port)
        try:
            cafile = workdir / "tls.crt"
            wait_until_serving(port, cafile)
            run_load(port, cafile, bodies, connections=2, seconds=1, rate=None)  # warm up
            paced = run_load(port, cafile, bodies, connections=PACED_CONNECTIONS,
                             seconds=PACED_SECONDS, rate=PACED_RATE)  # fmt: skip
            saturated = run_load(port, cafile, bodies, connections=SATURATION_CONNECTIONS,
                                 seconds=SATURATION_SECONDS, rate=None)  # fmt: skip
            plain_rate, plain_cpu = plain_load(process.pid, port, cafile, plain)
            with SlowClients(port, SLOW_CONNECTIONS):
                time.sleep(2)  # all of them open
                attacked = run_load(port, cafile, bodies, connections=PACED_CONNECTIONS,
                                    seconds=PACED_SECONDS, rate=PACED_RATE)  # fmt: skip
            flood = flood_rows(process.pid, port, cafile, workdir)
            bodiless = bodiless_rows(port, cafile, workdir)
        finally:
            process.terminate()
            process.wait(timeout=10)
        go_rate, go_cpu = go_reference_rate(workdir, port, plain)
        first = reviews(1)[0]  # a Deployment asking for gpumem: translated, with a template
        starts, bare = start_times(workdir, first)
    print(
        "webhook: AdmissionReviews over TLS on loopback, HTTP/1.1 keep-alive connections from a Go"
    )
    print("          load generator (paced rows open-loop, latency from each scheduled send); the")
    print("          webhook and the generator share the machine's cores")
    print(HEADER)
    print(row(f"paced {PACED_RATE}/s, {PACED_CONNECTIONS} conns", paced, "p99 <= 15 ms"))
    print(row(f"  same, {SLOW_CONNECTIONS:,} slow conns held", attacked, "p99 near the quiet one"))
    print(row(f"saturation, {SATURATION_CONNECTIONS} conns", saturated, ">= 800 admissions/s"))
    ratio = plain_rate.rate / go_rate.rate if go_rate.rate else 0.0
    print(row(f"pods without GPUs, {SATURATION_CONNECTIONS} conns", plain_rate,
              f">= the Go row ({ratio:.2f}x)"))  # fmt: skip
    print(row("  same pods, Go net/http webhook", go_rate, "reference"))
    print(f"  (server CPU per review without GPUs: {plain_cpu * 1e6:.0f} µs ours, "
          f"{go_cpu * 1e6:.0f} µs Go; gen CPU: the generator's CPU s per s)")  # fmt: skip
    for line in flood_lines(flood):
        print(line)
    for line in bodiless_lines(bodiless):
        print(line)
    print(start_row("process start to first GPU review", starts, "<= 150 ms"))
    print(start_row("  bare interpreter start", bare, "the machine's pace"))
    print(f"  (ms: median and slowest of {START_RUNS} starts, installed from a wheel as in the "
          "image; the review is a Deployment that core translates)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

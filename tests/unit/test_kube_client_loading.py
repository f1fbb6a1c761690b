"""`KubeApi`: the client package and the kubeconfig load on first use, once, with the same
named error for every caller; transient API answers are retried (4 tries), others are not."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from vgpu_bridge.kube import ATTEMPTS, KubeApi, KubeConfigError, KubeError

NO_CONTEXT = "apiVersion: v1\nkind: Config\nclusters: []\n"


def test_a_deferred_api_imports_no_client_until_it_is_used(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(NO_CONTEXT)
    script = (
        "import sys\n"
        "from vgpu_bridge.kube import KubeApi\n"
        f"api = KubeApi.connect_on_first_use({str(kubeconfig)!r})\n"
        "print('kubernetes' in sys.modules, 'urllib3' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_an_unreadable_kubeconfig_is_named_on_first_use_and_every_use_after(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(NO_CONTEXT)
    api = KubeApi.connect_on_first_use(str(kubeconfig))
    for attempt in (api.connected, lambda: api.get("/api/v1/nodes")):
        with pytest.raises(KubeConfigError, match=f"cannot read --kubeconfig {kubeconfig}: "):
            attempt()


def test_a_deferred_api_reaches_the_server_its_kubeconfig_names(tmp_path: Path) -> None:
    with answering([200]) as (port, paths):
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        )
        api = KubeApi.connect_on_first_use(str(kubeconfig))
        assert api.get("/api/v1/nodes/n") == {"answer": 1}
    assert paths == ["/api/v1/nodes/n"]


@pytest.mark.parametrize(
    ("statuses", "requests", "answer"),
    [
        pytest.param([503, 429, 200], 3, 200, id="transient-then-answered"),
        pytest.param([503] * 10, ATTEMPTS, 503, id="transient-every-time"),
        pytest.param([404, 200], 1, 404, id="not-found-is-no-retry"),
        pytest.param([409, 200], 1, 409, id="conflict-is-no-retry"),
    ],
)
def test_transient_answers_are_retried_others_are_not(
    statuses: list[int], requests: int, answer: int
) -> None:
    with answering(statuses) as (port, paths):
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{port}"
        api = KubeApi(client.ApiClient(configuration), timeout_s=5)
        if answer == 200:
            assert api.get("/api/v1/nodes/n") == {"answer": len(paths)}
        else:
            with pytest.raises(KubeError) as raised:
                api.get("/api/v1/nodes/n")
            assert raised.value.status == answer
    assert len(paths) == requests


@contextmanager
def answering(statuses: list[int]) -> Iterator[tuple[int, list[str]]]:
    """A loopback API server that answers GETs with `statuses` in turn; the paths asked for."""
    paths: list[str] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            status = statuses[min(len(paths), len(statuses)) - 1]
            body = json.dumps({"answer": len(paths)}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `paths`."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1], paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

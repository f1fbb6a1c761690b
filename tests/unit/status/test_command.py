"""`vgpu-bridge status` / `kubectl-vgpu status` over the real client against a loopback API
server holding the recorded objects: what it reads (and what it does not, with `-n`), the
namespace kubectl would choose, the agents' metrics through the pod proxy, `--context`,
`--watch`, `--version`, and failures as one line that says what to do, under the name it was
run as."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.status.recorded import NAMESPACE, NODE, MiB, agent_metrics, in_namespace, recorded
from tests.unit.status.served_api import ServedApi, served_api
from tests.unit.status.test_usage import in_use
from vgpu_bridge import __version__, cli
from vgpu_bridge.status import command

RESOURCE = "/apis/resource.k8s.io/v1"
AGENT = {
    "metadata": {"name": "vgpu-bridge-agent-x1", "namespace": "vgpu-bridge"},
    "spec": {"nodeName": NODE, "containers": [{"name": "agent", "ports": [
        {"name": "metrics", "containerPort": 9400}]}]},
    "status": {"phase": "Running"},
}  # fmt: skip
PROXY = "/api/v1/namespaces/vgpu-bridge/pods/vgpu-bridge-agent-x1:9400/proxy/metrics"
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
OUR_LABELS = "app.kubernetes.io/name=vgpu-bridge"
AGENTS = "/api/v1/namespaces/vgpu-bridge/pods"  # the release namespace's pods


def our_configuration(namespace: str = "vgpu-bridge") -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration: its webhook calls the Service of the release
    namespace, where the agents run too."""
    service = {"namespace": namespace, "name": "vgpu-bridge-webhook", "port": 443}
    hook = {"name": "translate.vgpu-bridge.io", "clientConfig": {"service": service}}
    return {"metadata": {"name": "vgpu-bridge"}, "webhooks": [hook]}


@pytest.fixture
def api() -> Iterator[ServedApi]:
    """The recorded cluster, an agent on its node answering with memory in use, in the namespace
    our webhook configuration names."""
    with served_api() as served:
        claims, pods = recorded("claims"), recorded("pods")
        served.list_of(f"{RESOURCE}/resourceslices", recorded("slices"))
        served.list_of(f"{RESOURCE}/resourceclaims", claims)
        served.list_of("/api/v1/pods", pods)
        served.list_of("/api/v1/pods", [AGENT], labelSelector=command.AGENT_SELECTOR)
        served.list_of(AGENTS, [AGENT], labelSelector=command.AGENT_SELECTOR)
        served.list_of(CONFIGURATIONS, [our_configuration()], labelSelector=OUR_LABELS)
        served.serve(PROXY, in_use())
        ns_claims = in_namespace(claims, NAMESPACE)
        served.list_of(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims", ns_claims)
        served.list_of(f"/api/v1/namespaces/{NAMESPACE}/pods", in_namespace(pods, NAMESPACE))
        yield served


def run(api: ServedApi, tmp_path: Path, *args: str) -> tuple[int, str]:
    kubeconfig = api.kubeconfig(tmp_path)
    out = io.StringIO()
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    parsed = parser.parse_args(["--kubeconfig", str(kubeconfig), "--context", "served", *args])
    code = command.main(parsed, {}, out)
    return code, out.getvalue()


def document(api: ServedApi, tmp_path: Path, *args: str) -> dict[str, Any]:
    code, text = run(api, tmp_path, *args, "-o", "json")
    assert code == 0
    found: dict[str, Any] = json.loads(text)
    return found


def shares(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    every = [*(s for card in found["cards"] for s in card["shares"]), *found["unplacedShares"]]
    return {share["pod"]: share for share in every}


def test_all_namespaces_shows_every_share_with_the_memory_its_agent_reports(
    api: ServedApi, tmp_path: Path
) -> None:
    found = document(api, tmp_path, "-A")
    assert set(shares(found)) == {"infer-a", "infer-b", "neighbour", "train"}
    assert shares(found)["infer-a"]["usedMemory"] == 512 * MiB
    assert [card["usedMemory"] for card in found["cards"]] == [512 * MiB, 3 * MiB + 7]
    assert (PROXY, {}) in api.asked
    assert found["notes"] == []


def test_a_namespace_user_is_asked_for_namespaced_objects_only_and_told_what_is_hidden(
    api: ServedApi, tmp_path: Path
) -> None:
    api.forbid(f"{RESOURCE}/resourceslices")
    api.forbid(f"{RESOURCE}/resourceclaims")
    api.forbid("/api/v1/pods")
    api.forbid("/api/v1/pods", labelSelector=command.AGENT_SELECTOR)
    api.forbid(CONFIGURATIONS, labelSelector=OUR_LABELS)
    found = document(api, tmp_path, "-n", NAMESPACE)
    assert set(shares(found)) == {"infer-a", "infer-b", "train"}
    assert found["cards"] == []
    assert [p["pod"] for p in found["pending"]] == ["too-big"]
    assert found["notes"] == [
        "ResourceSlices (cards): forbidden for this user, not shown",
        "the agents' metrics (live usage): forbidden for this user, not shown",
    ]
    assert [path for path, _ in api.asked] == [
        f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        f"{RESOURCE}/resourceslices",
        CONFIGURATIONS,  # where the agents are: never "/api/v1/pods" by label
    ]


def test_with_a_namespace_the_cards_still_count_every_namespaces_booking_where_readable(
    api: ServedApi, tmp_path: Path
) -> None:
    found = document(api, tmp_path, "-n", NAMESPACE)
    h100 = found["cards"][0]
    assert {s["pod"] for s in h100["shares"]} == {"infer-a", "infer-b"}
    assert (h100["bookedMemory"], h100["bookedCores"]) == (71000 * MiB, 85)
    api.forbid(f"{RESOURCE}/resourceclaims")
    found = document(api, tmp_path, "-n", NAMESPACE)
    assert found["cards"][0]["bookedMemory"] == 70000 * MiB
    assert found["notes"] == [
        "other namespaces' claims (BOOKED and FREE count this namespace's only): forbidden for "
        "this user, not shown"
    ]


def test_an_agent_whose_metrics_cannot_be_read_is_a_note_and_its_cards_show_no_usage(
    api: ServedApi, tmp_path: Path
) -> None:
    api.serve(PROXY, {"kind": "Status", "code": 404}, status=404)
    found = document(api, tmp_path, "-A")
    assert [card["usedMemory"] for card in found["cards"]] == [None, None]
    (note,) = found["notes"]
    assert note.startswith(f"the agent on {NODE}: metrics not read (GET {PROXY}: HTTP 404")


def test_an_agent_that_cannot_be_reached_is_a_note_and_the_rest_is_shown(
    api: ServedApi, tmp_path: Path
) -> None:
    api.drop(PROXY)
    found = document(api, tmp_path, "-A")
    assert set(shares(found)) == {"infer-a", "infer-b", "neighbour", "train"}
    (note,) = found["notes"]
    assert note.startswith(f"the agent on {NODE}: metrics not read (")


def test_an_agent_without_cuda_processes_reports_nothing_used(
    api: ServedApi, tmp_path: Path
) -> None:
    api.serve(PROXY, agent_metrics())
    assert [card["usedMemory"] for card in document(api, tmp_path, "-A")["cards"]] == [0, 0]


def test_the_current_context_is_used_without_context(api: ServedApi, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path)
    code, _ = run(api, tmp_path, "--context", "other")  # the last --context wins: nowhere
    assert code == command.EXIT_FAILED
    assert api.asked == []
    args = ["status", "--kubeconfig", str(kubeconfig), "--context", "served", "-A", "-o", "yaml"]
    assert cli.main(args) == 0
    assert api.asked


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed (nothing else binds it between)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_an_unreachable_server_is_one_line_naming_it_and_why(
    api: ServedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    kubeconfig = api.kubeconfig(tmp_path, nowhere=port)
    argv = ["status", "--kubeconfig", str(kubeconfig), "-A"]
    assert cli.main(argv) == command.EXIT_FAILED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"vgpu-bridge status: cannot reach the API server at http://127.0.0.1:{port}:"
        " connection refused\n"
    )
    assert command.kubectl_main(argv) == command.EXIT_FAILED
    assert capsys.readouterr().err == (
        f"kubectl vgpu: cannot reach the API server at http://127.0.0.1:{port}:"
        " connection refused\n"
    )


def test_a_forbidden_list_names_the_verb_resource_and_namespace_missing(
    api: ServedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.forbid(f"{RESOURCE}/resourceclaims")
    assert run(api, tmp_path, "-A") == (command.EXIT_FAILED, "")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "vgpu-bridge status: forbidden (HTTP 403): this user may not list"
        " resourceclaims.resource.k8s.io in every namespace; ask for it"
    )
    assert line.endswith(
        "or look at one namespace with -n NAMESPACE; check with:"
        " kubectl auth can-i list resourceclaims.resource.k8s.io -A"
    )
    api.forbid(f"/api/v1/namespaces/{NAMESPACE}/pods")
    assert run(api, tmp_path, "-n", NAMESPACE) == (command.EXIT_FAILED, "")
    (line,) = capsys.readouterr().err.splitlines()
    assert f"may not list pods in namespace {NAMESPACE};" in line
    assert line.endswith(f"check with: kubectl auth can-i list pods -n {NAMESPACE}")


@pytest.mark.parametrize(
    ("method", "path", "wanted"),
    [
        ("GET", "/api/v1/pods", ("list", "pods", None)),
        ("GET", "/api/v1/namespaces/a/pods/p", ("get", "pods", "a")),
        ("GET", "/api/v1/namespaces/a/pods/p:9400/proxy/metrics", ("get", "pods/proxy", "a")),
        ("GET", f"{RESOURCE}/resourceslices", ("list", "resourceslices.resource.k8s.io", None)),
        ("WATCH", f"{RESOURCE}/namespaces/b/resourceclaims", ("watch",
         "resourceclaims.resource.k8s.io", "b")),
    ],
)  # fmt: skip
def test_a_request_is_named_as_rbac_names_it(
    method: str, path: str, wanted: tuple[str, str, str | None]
) -> None:
    assert command.rbac_request(method, path) == wanted


def test_without_a_kubeconfig_outside_a_cluster_it_says_both_were_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config there
    assert command.kubectl_main(["status"]) == command.EXIT_FAILED
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "kubectl vgpu: no kubeconfig (no --kubeconfig, $KUBECONFIG unset, no ~/.kube/config)"
        " and not in a cluster ("
    )
    assert line.endswith("): point at one with --kubeconfig FILE or KUBECONFIG=FILE")


def test_without_n_or_a_the_contexts_namespace_is_read_as_kubectl_reads_it(
    api: ServedApi, tmp_path: Path
) -> None:
    kubeconfig = api.kubeconfig(tmp_path, namespace=NAMESPACE, current="served")
    assert command.kubectl_main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    assert [path for path, _ in api.asked[:2]] == [
        f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
    ]
    api.asked.clear()  # through $KUBECONFIG, naming the context: the same
    args = ["status", "--context", "served", "-o", "json"]
    monkeypatch_env = {"KUBECONFIG": str(kubeconfig)}
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.main(parser.parse_args(args[1:]), monkeypatch_env, io.StringIO()) == 0
    assert api.asked[0][0] == f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"


def test_a_context_without_a_namespace_means_default_and_a_wins_over_n(
    api: ServedApi, tmp_path: Path
) -> None:
    api.list_of(f"{RESOURCE}/namespaces/default/resourceclaims", [])
    api.list_of("/api/v1/namespaces/default/pods", [])
    code, _ = run(api, tmp_path, "-o", "json")  # context `served`: no namespace in it
    assert code == 0
    assert api.asked[0][0] == f"{RESOURCE}/namespaces/default/resourceclaims"
    api.asked.clear()
    code, _ = run(api, tmp_path, "-n", NAMESPACE, "-A", "-o", "json")
    assert code == 0
    assert api.asked[0][0] == f"{RESOURCE}/resourceclaims"


def test_a_pod_without_a_kubeconfig_uses_its_own_namespace() -> None:
    from vgpu_bridge.kube import KubeConfigError, context_namespace

    assert context_namespace(None, environ={"POD_NAMESPACE": "team-b"}) == "team-b"
    error = KubeConfigError("the kubeconfig context's namespace must be a DNS label")
    connected = command.failure_line(error, kubeconfig=None, server="https://10.0.0.1:443")
    assert connected == str(error)  # in a pod, connected: not "no kubeconfig"


def test_a_contexts_namespace_that_is_no_name_is_refused_naming_it(
    api: ServedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = api.kubeconfig(tmp_path, namespace="Team_A", current="served")
    assert command.kubectl_main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    assert capsys.readouterr().err.startswith(
        "kubectl vgpu: the kubeconfig context's namespace must be a DNS label"
    )
    assert api.asked == []


@pytest.mark.parametrize(
    ("main", "shown"),
    [(command.kubectl_main, "kubectl vgpu"), (cli.main, "vgpu-bridge")],
)
def test_version_prints_the_installed_packages_version(
    main: Any, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    version = importlib.metadata.version("vgpu-bridge")
    assert capsys.readouterr().out == f"{shown} {version}\n"
    assert version == __version__  # the source tree's, for a run without metadata (a zipapp)


def test_messages_carry_the_name_the_plugin_was_run_as(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command.plugin_prog("/home/u/.local/bin/kubectl-vgpu") == "kubectl vgpu"
    assert command.plugin_prog("/home/u/.krew/bin/kubectl-vgpu_bridge") == "kubectl vgpu-bridge"
    monkeypatch.setattr("sys.argv", ["/home/u/.krew/bin/kubectl-vgpu_bridge"])
    assert command.kubectl_main(["status", "-n", "Not_A_Namespace"]) == command.EXIT_USAGE
    assert capsys.readouterr().err.startswith(
        "kubectl vgpu-bridge: --namespace: must be a DNS label"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "Not_A_Namespace"], "--namespace: must be a DNS label"),
        (["--interval", "0"], "--interval: must be more than 0 seconds, got 0.0"),
        (["--request-timeout", "-1"], "--request-timeout: must be more than 0 seconds"),
        (["--driver-name", "GPU!"], "--driver-name: must be a DNS subdomain"),
        (["--agent-namespace", "a/b"], "--agent-namespace: must be a DNS label"),
        (["--webhook-service", "webhook"], "--webhook-service: must be NAMESPACE/NAME"),
        (["--webhook-service", "a/B"], "--webhook-service: the name must be a DNS label"),
    ],
)
def test_bad_flags_are_refused_by_name(
    api: ServedApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    assert run(api, tmp_path, *args) == (command.EXIT_USAGE, "")
    assert capsys.readouterr().err.startswith(f"vgpu-bridge status: {message}")
    assert api.asked == []


def test_watch_prints_a_stamped_view_each_interval_until_interrupted(
    api: ServedApi, tmp_path: Path
) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    kubeconfig = api.kubeconfig(tmp_path)
    args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--context", "served", "--watch",
                              "--interval", "7", "-A"])  # fmt: skip
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt

    out = io.StringIO()
    assert command.main(args, {}, out, sleep=sleep) == 0
    frames = out.getvalue().split("--- ")[1:]
    assert len(frames) == 2  # printed, slept, printed, interrupted while sleeping
    assert slept == [7.0, 7.0]
    assert all(f"{NAMESPACE}/infer-a" in frame for frame in frames)


def test_the_kubectl_plugin_takes_kubectls_flags_after_status(
    api: ServedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = api.kubeconfig(tmp_path)
    argv = ["status", "--kubeconfig", str(kubeconfig), "--context", "served", "-n", NAMESPACE,
            "-o", "wide"]  # fmt: skip
    assert command.kubectl_main(argv) == 0
    assert f"{NAMESPACE}/too-big" in capsys.readouterr().out


def test_the_kubeconfig_is_found_as_kubectl_finds_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert command.kubeconfig_path(None, {"HOME": str(home)}) is None  # in-cluster
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    environ = {"HOME": str(home)}
    assert command.kubeconfig_path(None, environ) == str(home / ".kube" / "config")
    environ["KUBECONFIG"] = "/a:/b"
    assert command.kubeconfig_path(None, environ) == "/a:/b"
    assert command.kubeconfig_path("/flag", environ) == "/flag"


@pytest.mark.parametrize(
    ("metadata", "port"),
    [
        pytest.param({"name": "../../nodes/x", "namespace": "vgpu-bridge"}, 9400, id="odd-name"),
        pytest.param({"name": "agent", "namespace": "a/b"}, 9400, id="odd-namespace"),
        pytest.param({"name": "agent", "namespace": "vgpu-bridge"}, "9400/x", id="odd-port"),
    ],
)
def test_an_agent_pod_whose_names_are_not_names_is_not_asked(
    metadata: dict[str, str], port: object
) -> None:
    ports = [{"name": "metrics", "containerPort": port}]
    pod = {"metadata": metadata, "spec": {"containers": [{"name": "agent", "ports": ports}]}}
    assert command.metrics_path(pod) is None
    assert command.metrics_path(AGENT) == PROXY

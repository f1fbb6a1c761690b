"""Our webhook process behind a Service the API server can proxy to, as the chart's Service is
in a cluster: `kubectl vgpu status -n` reads the webhook's /bookings through
``/api/v1/namespaces/NS/services/https:NAME:https/proxy/bookings``.

The API server proxies only to an endpoint address that a Pod holds (it checks the address's
target Pod and that Pod's IPs) and never to a loopback address. Here the webhook is a process on
this machine: it listens on all addresses, a stand-in Pod bound to one of the fake nodes carries
this machine's outward IPv4 address in its status (nothing runs it: the node has no kubelet),
and the Service's Endpoints name that Pod. A MutatingWebhookConfiguration with the chart's labels
names the Service, so the viewer finds it as it finds the chart's (never by the Service's labels:
those are any tenant's to set); its one webhook has no rules, so the API server never calls it.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from e2e.cluster.client import ApiError, KubeClient
from e2e.waiting import wait_for

LABELS = {"app.kubernetes.io/name": "vgpu-bridge", "app.kubernetes.io/component": "webhook"}
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SIOCGIFADDR = 0x8915


def outward_ipv4() -> str:
    """This machine's first IPv4 address that is not loopback (the API server proxies to no
    loopback address); RuntimeError when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue  # no IPv4 address on this interface
            address = socket.inet_ntoa(answer[20:24])
            if not address.startswith("127."):
                return address
    raise RuntimeError("no IPv4 address outside loopback: the API server cannot proxy here")


@contextmanager
def behind_service(
    kube: KubeClient, *, port: int, namespace: str, node: str, name: str = "vgpu-bridge-webhook"
) -> Iterator[str]:
    """A Service `namespace/name` (its port named https) whose one endpoint is `port` on this
    machine, through a stand-in Pod on `node`; yields "namespace/name", deletes it all after."""
    address = outward_ipv4()
    made: list[str] = []
    wait_for(lambda: namespace not in kube.terminating_namespaces(), timeout_s=120,
             what=f"namespace {namespace} deleted by an earlier use")  # fmt: skip
    if not kube.exists(f"/api/v1/namespaces/{namespace}"):
        kube.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        made.append(f"/api/v1/namespaces/{namespace}")
    pods, stand_in = f"/api/v1/namespaces/{namespace}/pods", f"{name}-stand-in"
    try:
        kube.create(pods, {"metadata": {"name": stand_in, "labels": LABELS}, "spec": {
            "nodeName": node, "containers": [{"name": "webhook", "image": "none"}],
            "tolerations": [{"operator": "Exists"}]}})  # fmt: skip
        made.append(f"{pods}/{stand_in}")
        kube.patch(f"{pods}/{stand_in}/status", {"status": {
            "phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})  # fmt: skip
        kube.create(f"/api/v1/namespaces/{namespace}/services", {
            "metadata": {"name": name, "labels": LABELS},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}})  # fmt: skip
        made.append(f"/api/v1/namespaces/{namespace}/services/{name}")
        target = {"kind": "Pod", "name": stand_in, "namespace": namespace}
        kube.create(f"/api/v1/namespaces/{namespace}/endpoints", {
            "metadata": {"name": name, "labels": LABELS},
            "subsets": [{"addresses": [{"ip": address, "targetRef": target}],
                         "ports": [{"name": "https", "port": port}]}]})  # fmt: skip
        made.append(f"/api/v1/namespaces/{namespace}/endpoints/{name}")
        kube.create(CONFIGURATIONS, {"metadata": {"name": namespace, "labels": LABELS},
            "webhooks": [{"name": "bookings.vgpu-bridge.io", "rules": [],
                          "clientConfig": {"service": {"namespace": namespace, "name": name}},
                          "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "failurePolicy": "Ignore"}]})  # fmt: skip
        made.append(f"{CONFIGURATIONS}/{namespace}")
        service = f"{namespace}/{name}"
        what = f"the webhook's /bookings through the service proxy of {service}"
        wait_for(lambda: bookings_answer(kube, service) == 200, timeout_s=60, what=what)
        yield service
    finally:
        for path in reversed(made):
            with suppress(Exception):  # the stand-in at once: no kubelet would ever confirm it
                kube.delete(path, grace_period_s=0 if path.endswith(stand_in) else None)
        if made and made[0] == f"/api/v1/namespaces/{namespace}":  # gone before what comes next
            with suppress(AssertionError):
                wait_for(lambda: not kube.exists(made[0]), timeout_s=60, what="namespace gone")


def bookings_answer(kube: KubeClient, service: str) -> int:
    """The HTTP status GET /bookings answers through the API server's service proxy."""
    namespace, name = service.split("/")
    try:
        kube.get(f"/api/v1/namespaces/{namespace}/services/https:{name}:https/proxy/bookings")
    except ApiError as error:
        return error.status
    return 200

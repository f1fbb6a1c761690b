"""The webhook keeps its own serving certificate (`--tls-secret`), so the chart renders no key
material and no caBundle, and two renders of it are the same (GitOps tools see no drift).

One pass (`CertificateKeeper.sync`): read our MutatingWebhookConfiguration; get the Secret, or
create it (`create` is the lock: when two replicas race, the one answered 409 reads the winner's),
or renew what is in it (`update` with its resourceVersion: on a 409 the next pass reads the
winner's); set every webhook's caBundle that differs, as our own field manager, so that
`helm upgrade` (which never renders a caBundle) leaves it alone; and write the serving pair to
`--tls-cert-file`/`--tls-key-file` (the key readable by its owner only; `server.TLSFiles` reloads
them). The Secret is owned by the configuration: uninstalling the chart deletes both.

A new CA is trusted before it is served: a replica switches to a certificate only when every
webhook's caBundle, as read at the start of its pass, already holds the signer (the pass that
writes a new CA into the bundle keeps serving the old CA's certificate, which the bundle still
holds, until the next pass), or when what it serves would not stay trusted anyway (nothing yet,
or a CA the bundle no longer holds). The API server's webhook client sees the configuration
through a watch, so the bundle reaches it a pass (`--tls-check-seconds`) before the certificate
changes. The old CA stays in the bundle until it expires (`certificates.renewed`).

At start `ensure` runs passes until one succeeds (bounded retries) before the server listens, so a
replica is ready only once the API server trusts it; afterwards `keep` runs one pass every
`--tls-check-seconds`: it renews, picks up another replica's renewal, and puts back a caBundle
that an upgrade left out (a webhook entry the chart added). Key material is never logged.
"""

from __future__ import annotations

import base64
import datetime
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vgpu_bridge.kube import Json, KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook import certificates
from vgpu_bridge.webhook.certificates import Material
from vgpu_bridge.webhook.ownership import owner_reference

log = get_logger("vgpu_bridge.webhook.cert_keeper")
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
FIELD_MANAGER = "vgpu-bridge-webhook"
TLS_TYPE = "kubernetes.io/tls"
#: no app.kubernetes.io/instance: Argo CD would take the Secret for part of the app and prune it
LABELS = {
    "app.kubernetes.io/name": "vgpu-bridge",
    "app.kubernetes.io/component": "webhook-certificate",
    "app.kubernetes.io/managed-by": FIELD_MANAGER,
}
KEYS = {"ca_bundle": "ca.crt", "ca_key": "ca.key", "cert": "tls.crt", "key": "tls.key"}
#: how long `ensure` tries at start (the configuration may be created just after the Deployment);
#: within the chart's liveness window (6 failures 10 s apart), so the reason is ours, not a kill
START_DEADLINE_S = 45.0


class CertificateSecretError(RuntimeError):
    """The Secret exists but cannot be ours (its type cannot be changed): the message says what
    to do."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Places:
    """Where the certificate lives: the Secret, the configuration, the Service, the files."""

    namespace: str
    secret: str
    configuration: str
    service: str
    cert_file: Path
    key_file: Path


class CertificateKeeper:
    def __init__(
        self, api: KubeApi, places: Places, *, clock: Callable[[], datetime.datetime] = _now
    ) -> None:
        self.api, self.places, self.clock = api, places, clock
        self.names = certificates.service_names(places.service, places.namespace)
        self.common_name = f"{places.service}-ca"
        self._secrets = api_path("/api/v1/namespaces", places.namespace, "secrets")

    def sync(self) -> bool:
        """One pass (see the module); whether the files changed."""
        configuration = self.api.get(api_path(CONFIGURATIONS, self.places.configuration))
        material = self._material(configuration["metadata"]["uid"])
        serve_now = self._may_serve(material, trusted=_bundles(configuration))
        self._trust(configuration, material.ca_bundle)
        if not serve_now:
            log.info("new CA written to the caBundle; its certificate is served from the next pass",
                     configuration=self.places.configuration)  # fmt: skip
            return False
        return write_pair(material, cert_file=self.places.cert_file,
                          key_file=self.places.key_file)  # fmt: skip

    def _may_serve(self, material: Material, *, trusted: list[bytes]) -> bool:
        """Serve `material.cert` now? Yes when every webhook trusted its signer before this pass,
        or when what is served now would not stay trusted anyway (nothing yet, or a CA that
        `material`'s bundle no longer holds); no while the API server may not yet have seen the
        bundle this pass writes."""
        if trusted and all(certificates.trusted_by(material.cert, bundle) for bundle in trusted):
            return True
        served = _read(self.places.cert_file)
        if served is None or served == material.cert:
            return True
        return not certificates.trusted_by(served, material.ca_bundle)

    def ensure(self, *, deadline_s: float = START_DEADLINE_S) -> None:
        """`sync` until it succeeds, for up to `deadline_s`; its last error after that."""
        from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

        for attempt in Retrying(
            retry=retry_if_exception(_worth_retrying),
            stop=stop_after_delay(deadline_s),
            wait=wait_exponential(multiplier=0.5, max=10),
            before_sleep=lambda state: log.warning(
                "serving certificate not in place yet; retrying",
                error=str(state.outcome.exception() if state.outcome else None),
            ),
            reraise=True,
        ):
            with attempt:
                self.sync()

    def _material(self, owner_uid: str) -> Material:
        path = api_path(self._secrets, self.places.secret)
        try:
            secret = self.api.get(path)
        except KubeError as error:
            if error.status != 404:
                raise
            return self._create(owner_uid)
        if secret.get("type") != TLS_TYPE:
            raise CertificateSecretError(
                f"Secret {self.places.namespace}/{self.places.secret}: type "
                f"{secret.get('type')!r}, not {TLS_TYPE} (a type cannot be changed): delete it "
                "and the webhook makes its own"
            )
        stored = _decoded(secret)
        fresh = certificates.renewed(stored, common_name=self.common_name, names=self.names,
                                     now=self.clock())  # fmt: skip
        if fresh is None and _owned_by(secret, owner_uid):
            return stored
        material = fresh or stored  # or only a new owner: the configuration was made anew
        version = secret["metadata"]["resourceVersion"]
        # a 409: another replica renewed it first; the next pass reads theirs
        self.api.replace(path, self._body(material, owner_uid, resource_version=version))
        if fresh is not None:
            log.info("serving certificate renewed", secret=self.places.secret,
                     expires=certificates.expires(material.cert).isoformat())  # fmt: skip
        return material

    def _create(self, owner_uid: str) -> Material:
        material = certificates.issue(self.common_name, names=self.names, now=self.clock())
        try:
            self.api.create(self._secrets, self._body(material, owner_uid))
        except KubeError as error:
            if error.status != 409:
                raise
            log.info("another replica made the serving certificate first; using it")
            return _decoded(self.api.get(api_path(self._secrets, self.places.secret)))
        log.info("serving certificate made", secret=self.places.secret,
                 expires=certificates.expires(material.cert).isoformat())  # fmt: skip
        return material

    def _body(self, material: Material, owner_uid: str, *, resource_version: str = "") -> Json:
        metadata: Json = {
            "name": self.places.secret,
            "namespace": self.places.namespace,
            "labels": LABELS,
            "ownerReferences": [owner_reference(self.places.configuration, owner_uid)],
        }
        if resource_version:
            metadata["resourceVersion"] = resource_version
        data = {key: _b64(getattr(material, field)) for field, key in KEYS.items()}
        return {"apiVersion": "v1", "kind": "Secret", "type": TLS_TYPE, "metadata": metadata,
                "data": data}  # fmt: skip

    def _trust(self, configuration: Json, ca_bundle: bytes) -> None:
        bundle = _b64(ca_bundle)
        stale = [
            {"name": hook["name"], "clientConfig": {"caBundle": bundle}}
            for hook in configuration.get("webhooks") or ()
            if hook.get("clientConfig", {}).get("caBundle") != bundle
        ]
        if not stale:
            return
        self.api.request(
            "PATCH",
            api_path(CONFIGURATIONS, self.places.configuration),
            query={"fieldManager": FIELD_MANAGER},
            body={"webhooks": stale},
            content_type=STRATEGIC_MERGE,
        )
        log.info("caBundle set", configuration=self.places.configuration,
                 webhooks=[hook["name"] for hook in stale])  # fmt: skip

    def keep(self, stop: threading.Event, *, every_s: float) -> None:
        """`sync()` every `every_s` seconds until `stop`; a failed pass is logged and retried
        at the next one (the certificate being served stays valid for months)."""
        while not stop.wait(every_s):
            try:
                self.sync()
            except Exception as error:  # logged and retried; never the key material
                log.warning("serving certificate check failed; will retry", error=str(error))


def _worth_retrying(error: BaseException) -> bool:
    """At start: an answer of the API (it may not know our RBAC or configuration yet, another
    replica may have renewed first) or no answer; not a Secret that cannot be ours."""
    if isinstance(error, KubeError | ConnectionError | TimeoutError):
        return True
    return type(error).__module__.startswith("urllib3")


def _bundles(configuration: Json) -> list[bytes]:
    """Each webhook's caBundle, decoded (empty when absent or not base64)."""
    bundles = []
    for hook in configuration.get("webhooks") or ():
        try:
            bundles.append(base64.b64decode(hook.get("clientConfig", {}).get("caBundle") or ""))
        except ValueError:  # binascii.Error: a bundle nobody can use trusts nothing
            bundles.append(b"")
    return bundles


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _decoded(secret: Json) -> Material:
    data = secret.get("data") or {}
    return Material(**{field: base64.b64decode(data.get(key, "")) for field, key in KEYS.items()})


def _owned_by(secret: Json, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in secret["metadata"].get("ownerReferences") or ())


def write_pair(material: Material, *, cert_file: Path, key_file: Path) -> bool:
    """Write the serving certificate and key where the server reads them, each replaced whole
    (the key never readable by others, not even for a moment); whether either changed."""
    changed = False
    for path, content in ((key_file, material.key), (cert_file, material.cert)):
        if path.exists() and path.read_bytes() == content:
            continue
        _replace(path, content)
        changed = True
    return changed


def _replace(path: Path, content: bytes) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:  # mkstemp makes the file 0600
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

"""What the webhook makes is owned by the chart's MutatingWebhookConfiguration
(`--webhook-configuration`), so that deleting it (`helm uninstall`, a GitOps prune) lets
Kubernetes' garbage collector delete the ResourceClaimTemplates and the certificate Secret too:
the webhook is gone by then, and nothing else would ever remove them. A namespaced object may
name a cluster-scoped owner.

The garbage collector deletes an object whose owner's uid does not exist, so a uid is written only
when it was confirmed by a GET a short while ago (`FRESH_S`; the restorer and the adoption confirm
it just before they write). The API server does not check an owner on create (nor on a patch:
`blockOwnerDeletion` is false, which needs no permission on the owner), so a uid that went stale
inside that window costs at most a template the collector deletes and the restorer makes again,
with the new uid. A configuration that is not there is `OwnerGone`: an uninstall in progress (it
is the first object `helm uninstall` deletes) or one about to be created (`helm install` creates
it after the Deployment); nothing is made, restored or adopted under it meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from vgpu_bridge.kube import Json, KubeApi, KubeError, api_path

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
OWNER_API_VERSION = "admissionregistration.k8s.io/v1"
OWNER_KIND = "MutatingWebhookConfiguration"
#: how long a confirmed uid is written without asking again: one GET per template create at most
#: this often; a configuration deleted and made again within it costs one template made twice
FRESH_S = 30.0


class OwnerUnavailable(Exception):
    """The uid of the configuration that owns what we make cannot be had: nothing is written."""


class OwnerGone(OwnerUnavailable):
    """The configuration that owns what we make does not exist (now)."""


class OwnerForbidden(OwnerUnavailable):
    """We may not read that configuration: a ClusterRole without the chart's rule."""


def owner_reference(name: str, uid: str) -> Json:
    """The reference to configuration `name` of `uid`: never blocking its deletion (a foreground
    uninstall must not wait on tenants' namespaces), never a controller (nothing reconciles)."""
    return {
        "apiVersion": OWNER_API_VERSION,
        "kind": OWNER_KIND,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": False,
        "controller": False,
    }


def _names_our_configuration(reference: Json, name: str) -> bool:
    group = str(reference.get("apiVersion", "")).split("/")[0]
    return (group, reference.get("kind"), reference.get("name")) == (
        OWNER_API_VERSION.split("/")[0],
        OWNER_KIND,
        name,
    )


def adopted_references(obj: Json, reference: Json) -> list[Json] | None:
    """`obj`'s ownerReferences with `reference` in place of any to a configuration of its name
    (one of an earlier install's uid, or none); None when it holds exactly `reference` already."""
    held = list((obj.get("metadata") or {}).get("ownerReferences") or ())
    if reference in held:
        return None
    others = [ref for ref in held if not _names_our_configuration(ref, reference["name"])]
    return [*others, reference]


class Owner:
    """The reference to `name`'s current uid (`reference`, from a GET at most `fresh_s` old;
    `confirm`, from a GET now). Name "": nothing is owned, both answer None."""

    def __init__(
        self,
        api: KubeApi | None,
        name: str,
        *,
        fresh_s: float = FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.name = api, name
        self._fresh_s, self._clock = fresh_s, clock
        self._lock = threading.Lock()
        self._confirmed: tuple[str, float] | None = None  # (uid, when)

    def reference(self) -> Json | None:
        """The reference to write now; OwnerGone when the configuration is not there."""
        if not self.name:
            return None
        with self._lock:
            confirmed = self._confirmed
        if confirmed is not None and self._clock() - confirmed[1] < self._fresh_s:
            return owner_reference(self.name, confirmed[0])
        return self.confirm()

    def confirm(self) -> Json | None:
        """The reference from a GET now; OwnerGone (and the remembered uid dropped) on a 404,
        OwnerForbidden on a 403."""
        if not self.name or self.api is None:
            return None
        try:
            configuration = self.api.get(api_path(CONFIGURATIONS, self.name))
        except KubeError as error:
            if error.status == 403:
                raise OwnerForbidden(
                    f"may not get MutatingWebhookConfiguration {self.name} "
                    "(--webhook-configuration), which owns the claim templates vgpu-bridge makes: "
                    "its ClusterRole needs get on it (the chart's grants it)"
                ) from None
            if error.status != 404:
                raise
            with self._lock:
                self._confirmed = None
            raise OwnerGone(
                f"MutatingWebhookConfiguration {self.name} (--webhook-configuration), which owns "
                "the claim templates vgpu-bridge makes, does not exist: being uninstalled, or "
                "not yet installed"
            ) from None
        uid = str(configuration["metadata"]["uid"])
        with self._lock:
            self._confirmed = (uid, self._clock())
        return owner_reference(self.name, uid)


NO_OWNER = Owner(None, "")

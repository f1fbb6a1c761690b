"""Hostile objects and AdmissionReviews, generated from a fixed seed.

Each `Case` carries what must hold for it besides "answered, never 5xx": `deny_path`, when the
input is a bad request we translate, is a field path the denial must name (the path notation of
`core.errors.FieldError`, e.g. `spec.containers[0].resources.limits[nvidia.com/gpu]`). Inputs
that are only odd (wrong types in fields we may not read, unicode, deep nesting) may be allowed
or denied; a denial must still name some field path.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
SEED = 15  # issue 15
# `[<object>: ]<field path>: <reason>`: a path starts with a top-level field of the object
FIELD_LINE = re.compile(r"(^|; |\n|: )(spec|metadata|kind|apiVersion)\b[^:;\n]*: ")
GPU_KEYS = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
)
VOLCANO_KEYS = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")
HUGE_DIGITS = "9" * 5000
BAD_EVERYWHERE = (
    "1e999999",
    "1e-999999",
    "-1",
    "1e400",
    "-1e999999",
    HUGE_DIGITS,
    "NaN",
    "Infinity",
    "abc",
    "0x10",
    "1e999999Ki",
    "99999999999999999999999Ei",
)
BAD_COUNTS = ("4Gi", "1e9", "33", "1.5", "1000000")
BAD_CLAIM_NAMES = (
    "../../other-ns/resourceclaims/x",
    "?watch=true",
    "%2e%2e",
    "..",
    "../../../../../api/v1/pods",
    "a/b",
    "x" * 300,
    "UPPER",
    "a?b=c",
    "a#b",
    "ä",
    "a b",
    "-a",
    "a.",
)
ODD_STRINGS = (
    "\u202egpu",
    "🚀",
    "\x00",
    "\ud800",
    "\uff21\uff22\uff23",
    "a\nb",
    "",
    " ",
    "\\",
    '"',
    "%00",
    "${x}",
    "'; DROP",
    "x" * 1000,
)


@dataclass(frozen=True)
class Case:
    family: str
    body: bytes
    content_type: str = "application/json"
    deny_path: str | None = None
    obj: Json | None = None  # the object under review, when there is one (for the CLI)
    note: str = ""  # what is hostile about it, for failure reports


def _note(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}…({len(text)} chars)"


def gpu_pod(limits: Json | None = None, **meta: Any) -> Json:
    limits = limits if limits is not None else {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    container = {"name": "main", "image": "cuda:12", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **meta},
        "spec": {"containers": [container]},
    }


def kai_pod(annotations: Json) -> Json:
    pod = gpu_pod({}, annotations=annotations, labels={"kai.scheduler/queue": "q"})
    pod["spec"]["schedulerName"] = "kai-scheduler"
    pod["spec"]["containers"][0].pop("resources")
    return pod


def volcano_job(spec: Any) -> Json:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": spec,
    }


def deployment(template: Any) -> Json:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": template},
    }


def review(obj: Any, **request: Any) -> Json:
    kind = obj.get("kind", "Pod") if isinstance(obj, dict) else "Pod"
    base = {
        "uid": "abuse",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "operation": "CREATE",
        "namespace": "team-a",
        "object": obj,
        "dryRun": True,
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {**base, **request},
    }


def object_case(
    family: str, obj: Json, deny_path: str | None = None, *, note: Any = None, **request: Any
) -> Case:
    body = json.dumps(review(obj, **request)).encode()
    return Case(family, body, deny_path=deny_path, obj=obj, note=_note(note or request))


# --- families of objects -----------------------------------------------------------------------


def bad_quantity(rng: random.Random) -> Case:
    key = rng.choice(GPU_KEYS + VOLCANO_KEYS)
    counts = key in ("nvidia.com/gpu", "volcano.sh/vgpu-number")
    value = rng.choice(BAD_EVERYWHERE + (BAD_COUNTS if counts else ()))
    where = rng.choice(("limits", "requests"))
    limits: Json = {key: value} if key.startswith("volcano") else {"nvidia.com/gpu": 1, key: value}
    pod = gpu_pod({} if where == "requests" else limits)
    if where == "requests":
        pod["spec"]["containers"][0]["resources"] = {"requests": limits}
    path = f"spec.containers[0].resources.{where}[{key}]"
    return object_case("quantity", pod, path, note=value)


def bad_kai_annotation(rng: random.Random) -> Case:
    key, values = rng.choice(
        (
            ("gpu-fraction", ("abc", "1e999999", "-0.5", "0", "2", "NaN", HUGE_DIGITS, "1/2", "")),
            ("gpu-memory", ("1e999999", "-1", "abc", HUGE_DIGITS, "1e400")),
        )
    )
    annotations = {key: rng.choice(values)}
    if rng.random() < 0.3:
        annotations = {
            "gpu-fraction": "0.5",
            "gpu-fraction-num-devices": rng.choice(
                ("1e9", "-1", "abc", "4Gi", HUGE_DIGITS, "1e999999", "0")
            ),
        }
        key = "gpu-fraction-num-devices"
    return object_case(
        "kai", kai_pod(annotations), f"metadata.annotations[{key}]", note=annotations
    )


def bad_device_choice(rng: random.Random) -> Case:
    choice = rng.randrange(4)
    if choice == 0:
        uuids = ",".join(f"GPU-{rng.getrandbits(128):032x}" for _ in range(300))
        key, annotations = "nvidia.com/use-gpuuuid", {"nvidia.com/use-gpuuuid": uuids}
    elif choice == 1:
        key = "nvidia.com/"  # either of the two may be named
        annotations = {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "A100"}
    elif choice == 2:
        key = "nvidia.com/use-gputype"
        # blank or separator-only choices mean "no constraint" (issue 16): not hostile
        annotations = {key: rng.choice(('A100") || true', ",,'", "x" * 5000, "\x00", "a\nb"))}
    else:
        key = "nvidia.com/nouse-gpuuuid"
        annotations = {key: rng.choice(('GPU-1"]', ", ')", 'GPU-1,"', "GPU-1\\", "x" * 5000))}
    prefix = f"metadata.annotations[{key}" if choice != 1 else "metadata.annotations[nvidia.com/"
    return object_case("device-choice", gpu_pod(annotations=annotations), prefix, note=annotations)


def bad_claim_name(rng: random.Random) -> Case:
    field = rng.choice(("resourceClaimName", "resourceClaimTemplateName"))
    pod = gpu_pod()
    claim = {"name": "mine", field: rng.choice(BAD_CLAIM_NAMES)}
    pod["spec"]["resourceClaims"] = [claim]
    return object_case("claim-name", pod, "spec.resourceClaims[0]", note=claim)


WRONG_TYPES: tuple[Any, ...] = (5, "x", [], {}, None, True, 1.5e308, [5], [None], [[]], -1)
# (where, how to put a value there); the path is where the value lands
PLACES: tuple[tuple[str, Callable[[Json, Any], None]], ...] = (
    ("spec", lambda o, v: o.__setitem__("spec", v)),
    ("metadata", lambda o, v: o.__setitem__("metadata", v)),
    ("spec.containers", lambda o, v: o["spec"].__setitem__("containers", v)),
    ("spec.initContainers", lambda o, v: o["spec"].__setitem__("initContainers", v)),
    ("spec.containers[0]", lambda o, v: o["spec"]["containers"].__setitem__(0, v)),
    ("spec.containers[0].name", lambda o, v: o["spec"]["containers"][0].__setitem__("name", v)),
    (
        "spec.containers[0].resources",
        lambda o, v: o["spec"]["containers"][0].__setitem__("resources", v),
    ),
    (
        "spec.containers[0].resources.limits",
        lambda o, v: o["spec"]["containers"][0]["resources"].__setitem__("limits", v),
    ),
    (
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        lambda o, v: o["spec"]["containers"][0]["resources"]["limits"].__setitem__(
            "nvidia.com/gpu", v
        ),
    ),
    ("metadata.annotations", lambda o, v: o["metadata"].__setitem__("annotations", v)),
    (
        "metadata.annotations[nvidia.com/use-gputype]",
        lambda o, v: o["metadata"].__setitem__("annotations", {"nvidia.com/use-gputype": v}),
    ),
    (
        "metadata.annotations[gpu-fraction]",
        lambda o, v: o["metadata"].__setitem__("annotations", {"gpu-fraction": v}),
    ),
    ("metadata.labels", lambda o, v: o["metadata"].__setitem__("labels", v)),
    ("metadata.name", lambda o, v: o["metadata"].__setitem__("name", v)),
    ("spec.resourceClaims", lambda o, v: o["spec"].__setitem__("resourceClaims", v)),
    ("spec.resourceClaims[0]", lambda o, v: o["spec"].__setitem__("resourceClaims", [v])),
    ("spec.schedulerName", lambda o, v: o["spec"].__setitem__("schedulerName", v)),
    ("kind", lambda o, v: o.__setitem__("kind", v)),
    ("apiVersion", lambda o, v: o.__setitem__("apiVersion", v)),
)


def wrong_type(rng: random.Random) -> Case:
    where, put = rng.choice(PLACES)
    obj = gpu_pod()
    value = copy.deepcopy(rng.choice(WRONG_TYPES))
    put(obj, value)
    return object_case("wrong-type", obj, note=f"{where}={value!r}")


def wrong_workload_shape(rng: random.Random) -> Case:
    value = copy.deepcopy(rng.choice(WRONG_TYPES))
    obj = rng.choice(
        (
            volcano_job("x"),
            volcano_job(value),
            volcano_job({"tasks": value}),
            volcano_job({"tasks": [{"name": "t", "template": value}]}),
            volcano_job({"tasks": [{"name": "t", "template": {"spec": value}}]}),
            deployment(value),
            deployment({"spec": value}),
            deployment({"metadata": value}),
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "c"},
                "spec": {"jobTemplate": {"spec": value}},
            },
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "g"},
                "spec": {"minResources": value},
            },
        )
    )
    return object_case("workload-shape", obj, note=obj)


def odd_strings(rng: random.Random) -> Case:
    text = rng.choice(ODD_STRINGS)
    obj = gpu_pod(annotations={rng.choice(("nvidia.com/use-gputype", "x", text)): text})
    obj["metadata"]["name"] = rng.choice(ODD_STRINGS)
    obj["spec"]["containers"][0]["name"] = rng.choice(ODD_STRINGS)
    obj["spec"]["containers"][0]["resources"]["limits"][text or "k"] = text
    return object_case("unicode", obj, note=text)


def missing_fields(rng: random.Random) -> Case:
    obj = gpu_pod()
    choice = rng.randrange(6)
    if choice == 0:
        del obj["spec"]
    elif choice == 1:
        del obj["metadata"]
    elif choice == 2:
        del obj["spec"]["containers"][0]["resources"]["limits"]
    elif choice == 3:
        obj["spec"]["containers"] = []
    elif choice == 4:
        obj = {}
    else:
        del obj["kind"], obj["apiVersion"]
    return object_case("missing-field", obj, note=obj)


def odd_review(rng: random.Random) -> Case:
    """The review itself is odd: a direct POST from the pod network can say anything."""
    key = rng.choice(("uid", "operation", "namespace", "dryRun", "kind", "object", "userInfo"))
    value = rng.choice(
        (*WRONG_TYPES, "../../../api/v1", "?watch=true", "x" * 10000, "DELETE", "UPDATE", "CONNECT")
    )
    return object_case("odd-review", gpu_pod(), **{key: copy.deepcopy(value)})


def not_json(rng: random.Random) -> Case:
    body = rng.choice(
        (
            b"",
            b"garbage",
            b"\xff\xfe\x00",
            b"{",
            b"null",
            b"[]",
            b"1e999999",
            b'"x"',
            b"NaN",
            b"kind: AdmissionReview\n",
            b"\x1f\x8b\x08\x00",
            b'{"kind": "AdmissionReview"}',
            b'{"apiVersion": 5}',
            bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300))),
        )
    )
    return Case("not-json", body, note=_note(body))


def odd_content_type(rng: random.Random) -> Case:
    body = json.dumps(review(gpu_pod())).encode()
    content_type = rng.choice(
        (
            "text/plain",
            "application/yaml",
            "multipart/form-data",
            "",
            "application/json; charset=utf-16",
            "x" * 2000,
        )
    )
    return Case("content-type", body, content_type, note=_note(content_type))


LIGHT: tuple[tuple[Callable[[random.Random], Case], int], ...] = (
    (bad_quantity, 30),
    (bad_kai_annotation, 10),
    (bad_device_choice, 6),
    (bad_claim_name, 10),
    (wrong_type, 20),
    (wrong_workload_shape, 8),
    (odd_strings, 6),
    (missing_fields, 4),
    (odd_review, 4),
    (not_json, 4),
    (odd_content_type, 2),
)


# --- heavy inputs: a fixed few, not drawn ------------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def heavy_cases() -> Iterator[Case]:
    """Deep nesting and huge strings, a few of each (each costs real time and memory)."""
    template = json.dumps(review(gpu_pod(annotations={"deep": "HOLE"})))
    for depth in (500, 1000, 10_000, 100_000, 1_000_000):
        note = f"{depth} levels"
        yield Case("deep-nesting", _nested(depth).encode(), note=f"body: {note}")
        nested = template.replace('"HOLE"', _nested(depth))
        yield Case("deep-nesting", nested.encode(), note=f"annotation: {note}")
        beside = template.replace('"dryRun": true', f'"x": {_nested(depth)}, "dryRun": true')
        yield Case("deep-nesting", beside.encode(), note=f"request.x: {note}")
    for size in (100_000, 1_000_000, 2_500_000):
        text = "x" * size
        for obj in (
            gpu_pod(annotations={"nvidia.com/use-gputype": text}),
            gpu_pod({"nvidia.com/gpu": 1, text: 1}),
            gpu_pod(name=text),
            gpu_pod({"nvidia.com/gpu": "9" * size}),
        ):
            yield object_case("huge-string", obj, note=f"{size} chars")


def cases(count: int, *, seed: int = SEED) -> list[Case]:
    """`count` cases: the heavy few, then light ones drawn by weight from a fixed seed."""
    rng = random.Random(seed)
    made = list(heavy_cases())
    families = [f for f, _ in LIGHT]
    weights = [w for _, w in LIGHT]
    while len(made) < count:
        made.append(rng.choices(families, weights)[0](rng))
    return made

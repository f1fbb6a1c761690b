"""A translated object re-applied from Git translates back to itself, and a changed request
replaces the earlier claims instead of adding a second set.

`kubectl apply` (client-side), `helm upgrade` and Argo CD's default sync send a strategic merge:
every field of the manifest is set again (the GPU limits and annotations translation removed come
back) and the fields only the live object has (the claims, the own-share variables, the label)
stay. `reapplied` does that merge for the golden cases' objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import DATA, run_cli
from vgpu_bridge.core import (
    DEFAULT,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
    translate,
)
from vgpu_bridge.core.jsonpatch import apply_patch

CASES = sorted(
    p for p in (DATA / "translate").iterdir() if p.is_dir() and not p.name.startswith("bad-")
)
CONTEXT = TranslationContext(config=TranslatorConfig(), profile=DEFAULT, inventory=Inventory())


def reapplied(manifest: Any, live: Any) -> Any:
    """`live` after a strategic merge of `manifest` (what a second apply sends): maps merge key
    by key, lists of named maps merge by name, anything else the manifest states wins."""
    if isinstance(manifest, dict) and isinstance(live, dict):
        merged = dict(live)
        for key, value in manifest.items():
            merged[key] = reapplied(value, live[key]) if key in live else value
        return merged
    if _named(manifest) and _named(live):
        by_name = {item["name"]: item for item in live}
        merged_list = [reapplied(m, by_name.get(m["name"], {})) for m in manifest]
        stated = {m["name"] for m in manifest}
        return merged_list + [item for item in live if item["name"] not in stated]
    return manifest


def _named(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _objects(text: str) -> list[dict[str, Any]]:
    """The documents of `text`, a List's items in its place."""
    found: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if doc:
            found += doc["items"] if doc.get("kind") == "List" else [doc]
    return found


def _args(case: Path) -> str:
    extra = (case / "args").read_text().strip() if (case / "args").exists() else ""
    return f"translate -f - {extra}"


def _translate(case: Path, text: str) -> list[dict[str, Any]]:
    result = run_cli(_args(case), stdin=text)
    assert result.code == 0, result.stderr
    return _objects(result.stdout)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reapplied_manifest_translates_back_to_the_live_object(case: Path) -> None:
    manifests = _objects((case / "in.yaml").read_text())
    first = _translate(case, (case / "in.yaml").read_text())
    live = [obj for obj in first if obj.get("kind") != "ResourceClaimTemplate"]
    merged = [reapplied(m, obj) for m, obj in zip(manifests, live, strict=True)]
    again = _translate(case, yaml.safe_dump_all(merged))
    assert again == first


def deployment(main_mib: int, *, init_mib: int = 500) -> dict[str, Any]:
    """A Deployment whose init container shares its app's claim with a smaller own share."""

    def container(name: str, mib: int) -> dict[str, Any]:
        return {"name": name, "image": "cuda:12",
                "resources": {"limits": {"nvidia.com/gpumem": mib}}}  # fmt: skip

    spec = {
        "initContainers": [container("warmup", init_mib)],
        "containers": [container("main", main_mib)],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {"template": {"metadata": {"annotations": {"nvidia.com/use-gputype": "H100"}},
                              "spec": spec}},
    }  # fmt: skip


def translated(obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    plan = translate(obj, context=CONTEXT)
    return plan.apply_to(obj), [t["metadata"]["name"] for t in plan.templates]


def test_changed_gpumem_replaces_the_earlier_claim_instead_of_adding_one() -> None:
    live, before = translated(deployment(1000))
    after_obj, after = translated(reapplied(deployment(4000), live))
    spec = after_obj["spec"]["template"]["spec"]
    assert before != after
    assert spec["resourceClaims"] == [{"name": "gpu-main", "resourceClaimTemplateName": after[0]}]
    main = spec["containers"][0]["resources"]
    assert main == {"claims": [{"name": "gpu-main"}]}
    warmup = spec["initContainers"][0]
    assert warmup["resources"] == {"claims": [{"name": "gpu-main"}]}
    assert [e["name"] for e in warmup["env"]] == ["VGPU_CONTAINER_MEMORY_LIMIT_0"]
    assert after_obj == translated(deployment(4000))[0]


def test_a_claim_the_user_wrote_stays_when_the_earlier_translation_is_replaced() -> None:
    manifest = deployment(1000)
    spec = manifest["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu-cache", "resourceClaimName": "shared-cache"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu-cache"}]
    live, _ = translated(manifest)
    again, _ = translated(reapplied(manifest, live))
    claims = again["spec"]["template"]["spec"]["resourceClaims"]
    assert [c["name"] for c in claims] == ["gpu-cache", "gpu-main"]
    assert again == live


def test_untranslated_object_with_our_names_is_refused_not_rewritten() -> None:
    """Without our label nothing is taken out: a claim the user named like ours is theirs."""
    manifest = deployment(1000)
    spec = manifest["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu-main", "resourceClaimTemplateName": "vgpu-0"}]
    with pytest.raises(InvalidRequest, match="already has a claim named gpu-main"):
        translate(manifest, context=CONTEXT)


def test_patch_applies_to_the_object_as_given() -> None:
    live, _ = translated(deployment(1000))
    merged = reapplied(deployment(2000), live)
    plan = translate(merged, context=CONTEXT)
    assert apply_patch(merged, plan.patch) == translated(deployment(2000))[0]

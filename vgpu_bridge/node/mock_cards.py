"""Mock cards named by a label on the agent's own Node (`--mock-gpus-node-label`), so that one
install gives each node of a CI cluster the cards its label names (docs/node.md, Mock GPUs).

The label's value is `<count>x<card>`: count 1..16, card a built-in profile (PROFILES, e.g.
`8xh100-80gb`: product name, memory, SM count, architecture and compute capability of that
card; case-insensitive) or a memory quantity (`2x24Gi`: product name "Mock GPU", MOCK_SM_COUNT
multiprocessors). Memory is the size in the profile's name in GiB, not NVML's exact total.

Card `i` of node `n` has the UUID `GPU-<uuid5(MOCK_UUID_NAMESPACE, "n/i")>`: the same on every
start of the agent (prepared claims keep their cards), distinct across nodes, and of the shape
NVML writes (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase hex), which the stand-in
driver (`mock_driver.py`) needs to present the claim's cards. The label is read once, at start:
a changed label takes effect when the agent restarts. A missing or invalid label stops the
agent with the label, its value and the reason (exit 1; the DaemonSet retries with back-off,
so fixing the label is enough).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.kube import KubeApi, KubeError, api_path, unreachable_reason
from vgpu_bridge.node.gpus import Gpu, GpuDiscoveryError

MAX_CARDS = 16  # what the stand-in driver presents at most (FAKE_MAX_DEVICES)
MAX_VALUE_LENGTH = 63  # a label value's limit
MIN_MEMORY = 2 * 2**20
MAX_MEMORY = 4 * 2**40
MOCK_PRODUCT_NAME = "Mock GPU"
MOCK_SM_COUNT = 132  # the stand-in driver's default
MOCK_UUID_NAMESPACE = uuid.UUID("6f1c3b52-3e0a-5c4e-9d55-6d6f636b6770")
VALUE = re.compile(r"([1-9][0-9]?)x(\S+)")


@dataclass(frozen=True, slots=True)
class CardProfile:
    """What one kind of card reports: NVML's product name, its memory, SMs and architecture."""

    product_name: str
    memory: int  # bytes
    sm_count: int
    architecture: str | None = None
    compute_capability: str | None = None


GiB = 2**30
PROFILES: Mapping[str, CardProfile] = {
    "h100-80gb": CardProfile("NVIDIA H100 80GB HBM3", 80 * GiB, 132, "Hopper", "9.0"),
    "h200-141gb": CardProfile("NVIDIA H200", 141 * GiB, 132, "Hopper", "9.0"),
    "a100-40gb": CardProfile("NVIDIA A100-SXM4-40GB", 40 * GiB, 108, "Ampere", "8.0"),
    "a100-80gb": CardProfile("NVIDIA A100-SXM4-80GB", 80 * GiB, 108, "Ampere", "8.0"),
    "l4-24gb": CardProfile("NVIDIA L4", 24 * GiB, 58, "Ada Lovelace", "8.9"),
    "t4-16gb": CardProfile("Tesla T4", 16 * GiB, 40, "Turing", "7.5"),
}


class MockLabelError(GpuDiscoveryError):
    """The Node's label names no cards; the message says which label, value and why."""


def card_uuid(node: str, index: int) -> str:
    """Card `index`'s UUID on `node` (NVML's shape, the same on every start)."""
    return f"GPU-{uuid.uuid5(MOCK_UUID_NAMESPACE, f'{node}/{index}')}"


def parse_label(value: str, *, node: str, label: str) -> tuple[Gpu, ...]:
    """The cards `<count>x<card>` names on `node`; MockLabelError saying why not."""

    def refused(reason: str) -> MockLabelError:
        return MockLabelError(f"Node {node}: label {label}={value[:MAX_VALUE_LENGTH]!r}: {reason}")

    if len(value) > MAX_VALUE_LENGTH:
        raise refused(f"longer than a label value may be ({MAX_VALUE_LENGTH})")
    found = VALUE.fullmatch(value)
    if found is None:
        raise refused(
            "expected <count>x<card>, e.g. 8xh100-80gb or 2x24Gi (count 1 to 16, card a "
            f"profile: {', '.join(PROFILES)}; or a memory quantity)"
        )
    count = int(found.group(1))
    if count > MAX_CARDS:
        raise refused(f"{count} cards: at most {MAX_CARDS} per node")
    profile = PROFILES.get(found.group(2).lower()) or _quantity_profile(found.group(2), refused)
    return tuple(
        Gpu(index=index, uuid=card_uuid(node, index), product_name=profile.product_name,
            memory=profile.memory, architecture=profile.architecture,
            compute_capability=profile.compute_capability, sm_count=profile.sm_count)
        for index in range(count)
    )  # fmt: skip


def _quantity_profile(card: str, refused: Callable[[str], MockLabelError]) -> CardProfile:
    try:
        size = parse_quantity(card)
    except QuantityError:
        raise refused(
            f"{card!r} is neither a card profile ({', '.join(PROFILES)}) nor a memory "
            "quantity (80Gi, 24Gi)"
        ) from None
    if size != size.to_integral_value() or not MIN_MEMORY <= size <= MAX_MEMORY:
        raise refused(f"memory {card} must be a whole number of bytes from 2Mi to 4Ti")
    return CardProfile(MOCK_PRODUCT_NAME, int(size), MOCK_SM_COUNT)


def node_label_gpus(api: KubeApi, *, node: str, label: str) -> tuple[Gpu, ...]:
    """The cards the label on `node` names, read from the API now; MockLabelError when the
    Node or its label is missing or the value names no cards."""
    try:
        found = api.get(api_path("/api/v1/nodes", node))
    except KubeError as error:
        raise MockLabelError(f"Node {node}: cannot read it for label {label}: {error}") from None
    except Exception as error:  # the transport's own failure, after every retry
        reason = unreachable_reason(error) or str(error)
        raise MockLabelError(f"Node {node}: cannot read it for label {label}: {reason}") from None
    labels = (found.get("metadata") or {}).get("labels") or {}
    value = labels.get(label)
    if not isinstance(value, str):
        raise MockLabelError(
            f"Node {node}: no label {label}: label the node with its mock cards, e.g. "
            f"kubectl label node {node} {label}=8xh100-80gb"
        )
    return parse_label(value, node=node, label=label)

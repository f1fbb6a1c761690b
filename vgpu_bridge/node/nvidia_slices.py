"""The cards NVIDIA's DRA driver (`gpu.nvidia.com`) publishes on this node, for the enforcer.

In enforcer mode (`--enforce-driver gpu.nvidia.com`) no card is ours: a claim's allocation names
NVIDIA's devices (`gpu-<minor>` in the pool named after the node), and only NVIDIA's
ResourceSlice says which card that is (its `uuid` attribute, the key of the limits file), how
much memory it has (capacity `memory`) and, in NVIDIA's `--consumable-shares=<N>` mode, into how
many shares it is cut (capacity `shares`, value N). Facts: docs/reference/nvidia-dra-driver.md
§1.2-1.4.

`cards_in_slices` reads the slices (pure); `NvidiaCards` keeps what it read, so that a Prepare
normally makes no API call: the list (`spec.nodeName`, `spec.driver` field selectors, paged) is
read again when a device is not known or the cache is older than MAX_AGE_S, at most once per
MIN_REFRESH_S on misses (a burst of claims for a card published a moment ago reads once). When
a read fails, what was read within MAX_STALE_S still answers; older, the read's error does.
`cached_card` never reads: the agent looks cards up that way under its state lock, after
`card` warmed the cache outside it (a slow API never holds up another claim's Prepare). Only
the newest generation of the node's pool counts, and at most MAX_DEVICES devices of it; a
device that is not a usable card (no uuid, no memory, a MIG or VFIO device) is kept with the
reason, which a claim that names it gets as its error.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vgpu_bridge.core.profiles import MAX_SHARES_PER_CARD, NVIDIA_DRIVER
from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.publisher import SLICES

Json = dict[str, Any]
MAX_AGE_S = 30.0  # a card's uuid and size do not change while it is published; its taints may
MIN_REFRESH_S = 1.0
MAX_STALE_S = 10 * MAX_AGE_S  # what a failed read leaves served: no older than this
MAX_DEVICES = 1024  # NVIDIA puts every GPU, MIG and VFIO device of a node in one slice
MAX_CARD_BYTES = 2**50  # a bound (1 PiB) far above any card; a bigger value is no card's
MAX_TEXT = 64  # attribute strings as the API server bounds them
FULL_GPU_NAME = re.compile(r"gpu-([0-9]{1,6})")  # NVIDIA's full GPU: gpu-<minor>
GPU_TYPE = "gpu"
UUID_ATTRIBUTE = "uuid"
TYPE_ATTRIBUTE = "type"
PRODUCT_ATTRIBUTE = "productName"
MEMORY_CAPACITY = "memory"
SHARES_CAPACITY = "shares"


class CardProblem(ValueError):
    """A device of NVIDIA's slice that the enforcer cannot hold to a share; says why."""


@dataclass(frozen=True, slots=True)
class NvidiaCard:
    """One full GPU as NVIDIA's slice publishes it."""

    device: str  # gpu-<minor>
    uuid: str
    product_name: str
    memory: int  # bytes, the card's `memory` capacity
    shares: int | None  # N of the `<N>` mode (capacity `shares`); None in `memory`/`unlimited`

    @property
    def gpu(self) -> Gpu:
        """The card as the rest of the agent knows cards (no device node: NVIDIA's spec has it)."""
        minor = FULL_GPU_NAME.fullmatch(self.device)
        index = int(minor.group(1)) if minor else 0
        return Gpu(index=index, uuid=self.uuid, product_name=self.product_name,
                   memory=self.memory)  # fmt: skip


Found = NvidiaCard | CardProblem


def cards_in_slices(slices: Iterable[Json], *, node: str) -> dict[str, Found]:
    """NVIDIA's devices in the newest generation of the pool named `node`, by device name: each
    a card, or the problem that keeps it from being one."""
    pool = [s for s in slices if _pool(s).get("name") == node]
    newest = max((_generation(s) for s in pool), default=0)
    found: dict[str, Found] = {}
    for entry in (d for s in pool if _generation(s) == newest for d in _devices(s)):
        if len(found) >= MAX_DEVICES:
            break
        name = entry.get("name")
        if isinstance(name, str) and name not in found:
            found[name] = _card(name, entry)
    return found


def _pool(slice_: Json) -> Json:
    pool = (slice_.get("spec") or {}).get("pool")
    return pool if isinstance(pool, dict) else {}


def _generation(slice_: Json) -> int:
    generation = _pool(slice_).get("generation")
    return generation if isinstance(generation, int) else 0


def _devices(slice_: Json) -> list[Json]:
    devices = (slice_.get("spec") or {}).get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _card(name: str, entry: Json) -> Found:
    try:
        return _read_card(name, entry)
    except CardProblem as problem:
        return problem


def _read_card(name: str, entry: Json) -> NvidiaCard:
    where = f"device {name[:MAX_TEXT]!r} of {NVIDIA_DRIVER}'s slice"
    kind = _attribute(entry, TYPE_ATTRIBUTE)
    if kind == "mig":
        raise CardProblem(f"{where}: MIG devices of {NVIDIA_DRIVER} are not enforced")
    if kind != GPU_TYPE:
        raise CardProblem(f"{where}: attribute type is {kind!r}, not {GPU_TYPE!r}: not enforced")
    uuid = _attribute(entry, UUID_ATTRIBUTE)
    if not uuid:
        raise CardProblem(f"{where}: no string attribute {UUID_ATTRIBUTE}")
    memory = _capacity(entry, MEMORY_CAPACITY, where, maximum=MAX_CARD_BYTES)
    if memory is None:
        raise CardProblem(f"{where}: no capacity {MEMORY_CAPACITY}")
    shares = _capacity(entry, SHARES_CAPACITY, where, maximum=MAX_SHARES_PER_CARD)
    product = _attribute(entry, PRODUCT_ATTRIBUTE) or ""
    return NvidiaCard(name, uuid, product, memory, shares)


def _attribute(entry: Json, name: str) -> str | None:
    """A string attribute, by its plain or its qualified name (`gpu.nvidia.com/uuid`)."""
    attributes = entry.get("attributes")
    if not isinstance(attributes, dict):
        return None
    value = attributes.get(name, attributes.get(f"{NVIDIA_DRIVER}/{name}"))
    text = value.get("string") if isinstance(value, dict) else None
    return text[:MAX_TEXT] if isinstance(text, str) else None


def _capacity(entry: Json, name: str, where: str, *, maximum: int) -> int | None:
    """A capacity's value as a whole number 1..maximum; None when the device has none."""
    capacities = entry.get("capacity")
    if not isinstance(capacities, dict):
        return None
    capacity = capacities.get(name, capacities.get(f"{NVIDIA_DRIVER}/{name}"))
    if capacity is None:
        return None
    value = capacity.get("value") if isinstance(capacity, dict) else None
    try:
        number = parse_quantity(value)
    except QuantityError as error:
        raise CardProblem(f"{where}: capacity {name}: {error}") from None
    if not Decimal(1) <= number <= maximum or number != number.to_integral_value():
        raise CardProblem(f"{where}: capacity {name} {str(value)[:MAX_TEXT]!r} is not 1..{maximum}")
    return int(number)


class NvidiaCards:
    """NVIDIA's cards on this node, read from its slices and kept (module doc). One read runs at
    a time, and never under the lock that a lookup of a known card takes: a slow API delays
    only the callers that need a read."""

    def __init__(
        self,
        read: Callable[[], list[Json]],
        *,
        node: str,
        max_age_s: float = MAX_AGE_S,
        max_stale_s: float = MAX_STALE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`read` lists NVIDIA's slices on this node (`slices_reader`)."""
        self._read = read
        self._node = node
        self._max_age_s = max_age_s
        self._max_stale_s = max_stale_s
        self._clock = clock
        self._lock = threading.Lock()  # guards the four fields below
        self._reading = threading.Lock()  # held while the slices are read
        self._found: Mapping[str, Found] = {}
        self._read_at: float | None = None  # the last read that succeeded
        self._tried_at: float | None = None  # the last read, whatever its outcome
        self._error: CardProblem | None = None  # the last read's failure; None once one succeeds

    def card(self, device: str) -> NvidiaCard:
        """The card published as `device`; CardProblem when it is none, or no card of this
        node's pool (after reading the slices again, when that is allowed), or when they
        cannot be read."""
        found = self._known(device)
        if found is None:
            self._read_again(device)
            found = self._known(device, fresh_only=False)
        return self._answer(device, found)

    def cached_card(self, device: str) -> NvidiaCard:
        """`card` from what was read, never reading (so never waiting on a read): for callers
        that hold a lock others wait on, after `card` warmed the cache outside it."""
        return self._answer(device, self._known(device, fresh_only=False))

    def _answer(self, device: str, found: Found | None) -> NvidiaCard:
        if found is None:
            raise CardProblem(
                f"device {device[:MAX_TEXT]!r} is not in {NVIDIA_DRIVER}'s slice of node "
                f"{self._node}"
            )
        if isinstance(found, CardProblem):
            raise found
        return found

    def cards(self) -> tuple[NvidiaCard, ...]:
        """The node's usable cards as last read; read again first when older than the max age
        and no read is under way (what was known stays when the API cannot be read now)."""
        if not self._fresh() and self._reading.acquire(blocking=False):
            try:
                with contextlib.suppress(Exception):  # metrics show what is known
                    self._refresh()
            finally:
                self._reading.release()
        with self._lock:
            found = list(self._found.values())
        return tuple(sorted((c for c in found if isinstance(c, NvidiaCard)),
                            key=lambda c: c.device))  # fmt: skip

    def _known(self, device: str, *, fresh_only: bool = True) -> Found | None:
        """What was read of `device`; None when unknown (or not fresh, with `fresh_only`).
        CardProblem raised when nothing read within MAX_STALE_S is left to answer."""
        with self._lock:
            if fresh_only and not self._fresh_locked():
                return None
            if self._read_at is None or self._clock() - self._read_at >= self._max_stale_s:
                self._refuse_stale_locked()
            return self._found.get(device)

    def _refuse_stale_locked(self) -> None:
        """Nothing recent enough is known: the last read's error, if it failed."""
        if self._error is not None:  # a new one: callers on other threads raise it too
            raise CardProblem(str(self._error))
        if self._read_at is not None:
            age = round(self._clock() - self._read_at)
            raise CardProblem(
                f"{NVIDIA_DRIVER}'s ResourceSlices of node {self._node} were last read {age} s "
                f"ago, more than {self._max_stale_s:g} s: not trusted"
            )

    def _read_again(self, device: str) -> None:
        """Read the slices for a Prepare that missed `device`, unless a read finished within
        MIN_REFRESH_S (a burst of misses reads once); its failure is the claim's error."""
        with self._reading:
            with self._lock:
                recent = self._tried_within(MIN_REFRESH_S)
                if recent and device in self._found and self._fresh_locked():
                    return
            if recent:
                return
            try:
                self._refresh()
            except Exception as error:  # the API unreachable after retries, or refusing
                problem = CardProblem(
                    f"reading {NVIDIA_DRIVER}'s ResourceSlices of node {self._node}: {error}"
                )
                with self._lock:
                    self._error = problem
                raise problem from None

    def _fresh(self) -> bool:
        with self._lock:
            return self._fresh_locked()

    def _fresh_locked(self) -> bool:
        return self._read_at is not None and self._clock() - self._read_at < self._max_age_s

    def _tried_within(self, seconds: float) -> bool:
        return self._tried_at is not None and self._clock() - self._tried_at < seconds

    def _refresh(self) -> None:
        """Read the slices (the caller holds `_reading`, not `_lock`) and keep what they say."""
        started = self._clock()
        with self._lock:
            self._tried_at = started  # a failing API is not asked again at once
        found = cards_in_slices(self._read(), node=self._node)
        with self._lock:
            self._found, self._read_at, self._error = found, started, None


def allocated_devices(claim: Json, *, node: str) -> list[str]:
    """The devices of NVIDIA's pool `node` that `claim`'s allocation names, in order, each once
    and at most MAX_DEVICES (the enforcer checks the allocation itself; this only says which
    cards to look up ahead)."""
    allocation = (claim.get("status") or {}).get("allocation")
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    named: dict[str, None] = {}
    for result in results[:MAX_DEVICES] if isinstance(results, list) else ():
        if not isinstance(result, dict) or result.get("driver") != NVIDIA_DRIVER:
            continue
        device = result.get("device")
        if result.get("pool") == node and isinstance(device, str):
            named[device] = None
    return list(named)


def slices_reader(api: KubeApi, *, node: str) -> Callable[[], list[Json]]:
    """What lists NVIDIA's ResourceSlices on `node`: field selectors, paged, each slice kept
    with its pool and devices only."""
    selector = f"spec.nodeName={node},spec.driver={NVIDIA_DRIVER}"

    def keep(item: Json) -> Json:
        spec = item.get("spec") or {}
        return {"spec": {"pool": spec.get("pool"), "devices": spec.get("devices")}}

    def read() -> list[Json]:
        return api.list_all(SLICES, keep=keep, fieldSelector=selector).items

    return read

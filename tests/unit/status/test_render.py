"""The report as tables (kubectl's look: `table`, `wide`) and as JSON and YAML documents."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from tests.unit.status.recorded import NAMESPACE, NODE, recorded
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.status import Report, build_report
from vgpu_bridge.status.render import REASON_WIDTH, as_document, render, size


def report() -> Report:
    return build_report(recorded("slices"), recorded("claims"), recorded("pods"), profile=DEFAULT,
                        notes=["the agent on n: metrics not read"])  # fmt: skip


def rows(text: str, header: str) -> list[list[str]]:
    """The rows of the table whose header line starts with `header`, cut at 2+ spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    table = []
    for line in lines[start:]:
        if not line.strip():
            break
        table.append([cell for cell in line.split("  ") if cell.strip()])
    return [[cell.strip() for cell in row] for row in table]


def test_the_table_has_a_row_per_card_with_booked_free_and_used() -> None:
    cards = rows(render(report(), "table"), "NODE")
    assert cards[0] == ["NODE", "DEVICE", "PRODUCT", "MEMORY", "BOOKED", "FREE", "USED", "CORES",
                        "FREE-CORES", "SHARES"]  # fmt: skip
    assert cards[1] == [NODE, "gpu-0", "NVIDIA H100 80GB HBM3", "80Gi", "71000Mi", "10920Mi", "-",
                        "85/100", "15", "3"]  # fmt: skip


def test_the_table_has_a_row_per_share_and_per_pending_pod() -> None:
    text = render(report(), "table")
    shares = rows(text.split("\n\n")[1], "NODE")
    assert shares[0][:5] == ["NODE", "DEVICE", "NAMESPACE/POD", "CONTAINERS", "CLAIM"]
    infer_a = next(row for row in shares if row[2] == f"{NAMESPACE}/infer-a")
    assert infer_a[5:] == ["30000Mi", "30", "0", "-", "-"]  # memory, cores, priority, used, SM%
    (pending,) = rows(text, "PENDING")[1:]
    assert pending[:2] == [f"{NAMESPACE}/too-big", "default-scheduler"]
    assert text.rstrip().endswith("note: the agent on n: metrics not read")


def test_no_cards_in_view_is_said_in_words() -> None:
    empty = render(Report((), (), ()), "table")
    assert empty == "No cards of the driver in view (no ResourceSlices of it, or see the notes).\n"
    shares_only = render(replace(report(), cards=(), unplaced=report().cards[0].shares), "table")
    assert shares_only.startswith("No cards of the driver in view")
    assert f"{NAMESPACE}/infer-a" in shares_only


def test_wide_adds_the_uuids_and_prints_a_long_reason_whole() -> None:
    long_reason = "0/9 nodes are available: " + "1 cannot allocate all claims, " * 10
    pending = (replace(report().pending[0], reason=long_reason),)
    text = render(replace(report(), pending=pending), "table")
    wide = render(replace(report(), pending=pending), "wide")
    assert "UUID" not in text
    assert rows(wide, "NODE")[1][2] == "GPU-agent-0000"
    assert rows(text, "PENDING")[1][2] == long_reason.strip()[: REASON_WIDTH - 3] + "..."
    assert rows(wide, "PENDING")[1][2] == long_reason.strip()


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_documents_carry_bytes_and_percent_with_null_for_not_known(output: str) -> None:
    text = render(report(), output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert document == as_document(report())
    gpu1 = document["cards"][1]
    assert gpu1 | {"shares": []} == {
        "node": NODE, "device": "gpu-1", "uuid": "GPU-agent-0001",
        "product": "NVIDIA A100-PCIE-40GB", "memory": 40 * 2**30,
        "bookedMemory": 20000 * 2**20, "freeMemory": 40 * 2**30 - 20000 * 2**20,
        "usedMemory": None, "cores": 100, "bookedCores": 40, "freeCores": 60, "shares": [],
    }  # fmt: skip
    (train,) = gpu1["shares"]
    assert (train["pod"], train["memory"], train["priority"]) == ("train", 20000 * 2**20, 1)


@pytest.mark.parametrize(
    ("count", "shown"),
    [(None, "-"), (0, "0"), (3000 * 2**20, "3000Mi"), (80 * 2**30, "80Gi"),
     (5 * 2**20 + 2**19, "5.5Mi"), (123, "0.0Mi")],
)  # fmt: skip
def test_sizes_are_exact_binary_units_or_mib_with_one_decimal(
    count: int | None, shown: str
) -> None:
    assert size(count) == shown


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match="output: must be one of table, wide, json, yaml, got 'xml'"
    ):
        render(report(), "xml")

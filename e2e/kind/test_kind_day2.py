"""The day-two pieces that need no cluster (issue 38): how the load generator reads the API
server's answers, the previous release's name, and that ``make e2e-kind`` collects the fast
day-two scenarios."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from bench.day2_load import (
    APISERVER_DOWN,
    CREATED,
    DENIED,
    OTHER,
    REFUSED,
    TIMED_OUT,
    Load,
    classify,
    counts,
)
from e2e.cluster.settings import REPO_ROOT
from e2e.kind.releases import PREVIOUS_RELEASE, Release
from e2e.waiting import wait_for

CALL = (
    'failed calling webhook "pods.vgpu-bridge.io": failed to call webhook: Post '
    '"https://vgpu-bridge-webhook.vgpu-bridge.svc:443/mutate?timeout=10s": '
)


def status(message: str) -> str:
    return json.dumps({"kind": "Status", "message": "Internal error occurred: " + message})


@pytest.mark.parametrize(
    ("code", "body", "expected"),
    [
        (201, "{}", CREATED),
        # the URL's own ?timeout=10s is no timeout: a broken pipe is a refusal
        (500, status(CALL + "write tcp 1.2.3.4:5->6.7.8.9:443: write: broken pipe"), REFUSED),
        (500, status(CALL + "dial tcp 10.96.0.1:443: connect: connection refused"), REFUSED),
        (500, status(CALL + "context deadline exceeded"), TIMED_OUT),
        (500, status(CALL + "net/http: request canceled (Client.Timeout exceeded)"), TIMED_OUT),
        (400, status('admission webhook "pods.vgpu-bridge.io" denied the request: no'), DENIED),
        (504, "{}", TIMED_OUT),
        (409, status("pods already exists"), OTHER),
        (500, "not json", OTHER),
    ],
)
def test_the_load_generator_tells_refused_from_timed_out_creates(
    code: int, body: str, expected: str
) -> None:
    assert classify(code, body)[0] == expected


def test_the_load_generator_counts_each_outcome_by_when_it_was_due() -> None:
    answers = iter([(CREATED, ""), (REFUSED, "x"), (APISERVER_DOWN, "y")] * 100)
    load = Load(lambda namespace, name: next(answers), ["a", "b"], rate=200.0, threads=1)
    load.start()
    wait_for(lambda: len(load.outcomes) >= 30, timeout_s=60, what="30 outcomes", interval_s=0.01)
    outcomes = load.stop()
    assert [o.due_s for o in outcomes] == sorted(o.due_s for o in outcomes)
    tally = counts(outcomes)
    assert set(tally) == {CREATED, REFUSED, APISERVER_DOWN}
    assert sum(tally.values()) == len(outcomes)


def test_the_previous_release_is_a_commit_of_this_repository_and_its_images_are_tagged_by_it() -> (
    None
):
    if not _shallow_clone():  # a shallow clone (CI's may be one) has no history to look in
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "cat-file", "-t", PREVIOUS_RELEASE],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.stdout.strip() == "commit", done.stderr
    assert (REPO_ROOT / "tests" / "fixtures" / "ondisk" / PREVIOUS_RELEASE).is_dir()
    release = Release(PREVIOUS_RELEASE, REPO_ROOT / "nowhere")
    assert release.image("webhook") == f"vgpu-bridge-webhook:prev-{PREVIOUS_RELEASE}"
    assert release.helm_values() == ["--set", f"image.tag=prev-{PREVIOUS_RELEASE}"]


def _shallow_clone() -> bool:
    done = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() == "true"


def test_make_e2e_kind_collects_the_day_two_scenarios_after_the_first_file() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "$(sort $(wildcard e2e/kind/scenarios*.py))" in makefile
    names = sorted(p.name for p in (REPO_ROOT / "e2e" / "kind").glob("scenarios*.py"))
    assert names[0] == "scenarios.py"
    assert "scenarios_day2.py" in names
    assert re.search(r"^bench-day2:", makefile, re.MULTILINE)

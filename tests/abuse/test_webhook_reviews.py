"""10,000 malformed and extreme AdmissionReviews (fixed seed) against the real webhook process:
each answered within a deadline, never with a 5xx, every denial naming a field path (the very
path, for requests we translate); /healthz answering throughout; memory bounded; no hostile name
reaching an API URL; and the log staying one JSON object per line (no tracebacks)."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from tests.abuse.fake_api import FakeApi
from tests.abuse.hostile import BAD_CLAIM_NAMES, FIELD_LINE, Case, cases, gpu_pod, review
from tests.abuse.probe import Prober
from tests.abuse.processes import non_json_lines, tail
from tests.abuse.webhook_client import Client, Webhook
from vgpu_bridge.core import DEFAULT

INPUTS = 10_000
WORKERS = 4
MAX_RSS_MB = 500
MAX_HANGS = 3  # a hung webhook costs the deadline per input: stop early, the failure is clear


def judge(case: Case, status: int, data: bytes) -> str | None:
    """What is wrong with this answer, or None."""
    if status >= 500:
        return f"HTTP {status}: {data[:200]!r}"
    if status != 200:
        return None if case.deny_path is None else f"HTTP {status} for a review to deny"
    try:
        response = json.loads(data)["response"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP 200 without an AdmissionReview response: {data[:200]!r}"
    if response.get("allowed") is True:
        return None if case.deny_path is None else f"allowed; expected a denial at {case.deny_path}"
    message = str((response.get("status") or {}).get("message", ""))
    if case.deny_path is not None and case.deny_path not in message:
        return f"denial does not name {case.deny_path}: {message[:300]}"
    return None if FIELD_LINE.search(message) else f"denial names no field: {message[:300]}"


@dataclass
class Results:
    failures: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    answered: Counter[str] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)
    hangs: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, case: Case, index: int, problem: str | None, seconds: float) -> None:
        with self.lock:
            self.answered[case.family] += 1
            self.slowest[case.family] = max(self.slowest.get(case.family, 0.0), seconds)
            if problem is not None:
                self.failures[case.family].append(f"#{index} {case.note}: {problem}")

    def report(self) -> str:
        lines = []
        for family, problems in sorted(self.failures.items()):
            lines.append(f"{family}: {len(problems)} failed, e.g.")
            hung = [p for p in problems if "timed out" in p]
            lines.extend(f"    {p[:300]}" for p in (hung + problems)[:4])
        return "\n".join(lines)


def send_all(webhook: Webhook, chunk: list[tuple[int, Case]], results: Results) -> None:
    client = Client(webhook)
    for index, case in chunk:
        if results.hangs >= MAX_HANGS:
            return
        try:
            status, data, seconds = client.post(case.body, case.content_type)
        except OSError as error:
            with results.lock:
                results.hangs += "timed out" in str(error)
            results.record(case, index, f"no answer: {error}", 0.0)
            continue
        results.record(case, index, judge(case, status, data), seconds)
    client.close()


def fuzz(webhook: Webhook, inputs: list[Case]) -> Results:
    results = Results()
    numbered = list(enumerate(inputs))
    threads = [
        threading.Thread(target=send_all, args=(webhook, numbered[i::WORKERS], results))
        for i in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_ten_thousand_hostile_reviews_are_each_answered_without_5xx_and_denials_name_the_field(
    webhook: Webhook, api: FakeApi
) -> None:
    inputs = cases(INPUTS)
    with Prober(webhook.process.pid, lambda: webhook.get("/healthz")[0]) as prober:
        results = fuzz(webhook, inputs)
    slowest = ", ".join(f"{f} {s:.2f}s" for f, s in sorted(results.slowest.items()))
    print(
        f"\nabuse/webhook: {sum(results.answered.values())} inputs; slowest answer by family: "
        f"{slowest}; {prober.summary()}"
    )
    assert results.hangs < MAX_HANGS, f"the webhook hung:\n{results.report()}"
    assert not results.failures, results.report()
    assert not prober.failures, prober.failures[:10]
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
    assert webhook.process.poll() is None, tail(webhook.log_file)
    assert webhook.admit_normal_pod()["allowed"] is True
    assert not api.unsafe_requests(), api.unsafe_requests()[:10]
    assert not non_json_lines(webhook.log_file), non_json_lines(webhook.log_file)[:10]


def opted_out_privileged_pod(claim: dict[str, str]) -> bytes:
    pod = gpu_pod({"cpu": "1"}, labels={"vgpu-bridge.io/ignore": "true"})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    pod["spec"]["resourceClaims"] = [{"name": "gpu", **claim}]
    return json.dumps(review(pod)).encode()


def test_the_opt_out_label_does_not_lift_the_guardrails_of_a_claim_of_our_class(
    webhook: Webhook, api: FakeApi
) -> None:
    """Guardrails follow the claim, not the label (issue 25): an opted-out privileged pod that
    names a claim of our class, one that does not exist yet, or a hostile name, is refused naming
    the field, and no hostile name reaches an API URL."""
    ours = {"name": "g", "exactly": {"deviceClassName": DEFAULT.device_class}}
    with api.lock:
        api.claims["opted-out-ours"] = {"spec": {"devices": {"requests": [ours]}}}
    claims = [{"resourceClaimName": "opted-out-ours"}, {"resourceClaimTemplateName": "later"}]
    claims += [{"resourceClaimName": name} for name in BAD_CLAIM_NAMES]
    client = Client(webhook)
    try:
        for claim in claims:
            status, data, _ = client.post(opted_out_privileged_pod(claim), "application/json")
            assert status == 200, (claim, data[:300])
            response = json.loads(data)["response"]
            assert response["allowed"] is False, (claim, response)
            message = response["status"]["message"]
            assert "spec.containers[0].securityContext.privileged" in message, (claim, message)
            assert "spec.resourceClaims[0]." in message, (claim, message)
    finally:
        client.close()
        with api.lock:
            del api.claims["opted-out-ours"]
    assert not api.unsafe_requests(), api.unsafe_requests()[:10]


def test_a_foreign_drivers_unparseable_slice_does_not_keep_the_webhook_unready(
    webhook: Webhook,
) -> None:
    """The fake API lists a foreign driver's slice with capacity `1e999999` (item 9)."""
    from tests.abuse.processes import wait_until

    wait_until(
        lambda: webhook.get("/readyz")[0] == 200,
        webhook.process,
        webhook.log_file,
        "webhook /readyz",
    )

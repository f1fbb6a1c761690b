"""The event book over an injected clock: identical occurrences aggregate into one Event's series
within the window, new Events are rate-limited per namespace and overall, series are written at
most every few seconds, and its memory is bounded."""

from __future__ import annotations

from vgpu_bridge.webhook.events import EventBook, Limit, Series, TokenBucket, Verdict

KEY = ("v1", "Pod", "team-a", "share", "", "Warning", "GpuShareRefused", "Refuse", "why", "")


def key(note: str) -> tuple[str, ...]:
    return (*KEY[:8], note, "")


def posted(book: EventBook, key: tuple[str, ...], *, now: float, namespace: str = "team-a") -> None:
    book.posted(key, Series(namespace, f"e-{len(key)}", 1, now, now, written_at=now))


def test_identical_occurrences_repeat_one_event_within_the_window() -> None:
    book = EventBook(window_s=600)
    assert book.observe(KEY, "team-a", now=0, wall=0) is Verdict.NEW
    posted(book, KEY, now=0)
    verdicts = [book.observe(KEY, "team-a", now=t, wall=t) for t in range(1, 200)]
    assert set(verdicts) == {Verdict.REPEAT}
    [series] = book.due(now=199, every_s=5)
    assert series.count == 200
    assert series.last_seen_wall == 199


def test_an_occurrence_after_the_window_starts_a_new_event() -> None:
    book = EventBook(window_s=600)
    book.observe(KEY, "team-a", now=0, wall=0)
    posted(book, KEY, now=0)
    assert book.observe(KEY, "team-a", now=601, wall=601) is Verdict.NEW


def test_new_events_of_a_namespace_stop_at_its_burst_and_come_back_at_its_rate() -> None:
    book = EventBook(per_namespace=Limit(burst=3, per_s=0.5), overall=Limit(100, 100))
    verdicts = [book.observe(key(str(i)), "team-a", now=0, wall=0) for i in range(5)]
    assert verdicts == [Verdict.NEW] * 3 + [Verdict.LIMITED] * 2
    assert book.observe(key("other ns"), "team-b", now=0, wall=0) is Verdict.NEW
    assert book.observe(key("after 1 s"), "team-a", now=1, wall=1) is Verdict.LIMITED
    assert book.observe(key("after 2 s"), "team-a", now=2, wall=2) is Verdict.NEW


def test_the_overall_limit_holds_across_namespaces() -> None:
    book = EventBook(per_namespace=Limit(burst=2, per_s=0), overall=Limit(burst=5, per_s=0))
    verdicts = [book.observe(key(str(i)), f"ns-{i}", now=0, wall=0) for i in range(8)]
    assert verdicts.count(Verdict.NEW) == 5


def test_a_namespace_refused_by_the_overall_limit_keeps_its_token() -> None:
    book = EventBook(per_namespace=Limit(burst=1, per_s=0), overall=Limit(burst=1, per_s=1))
    assert book.observe(key("a"), "ns-a", now=0, wall=0) is Verdict.NEW
    assert book.observe(key("b"), "ns-b", now=0, wall=0) is Verdict.LIMITED
    assert book.observe(key("b"), "ns-b", now=1, wall=1) is Verdict.NEW


def test_repeats_are_due_for_writing_at_most_every_few_seconds() -> None:
    book = EventBook()
    book.observe(KEY, "team-a", now=0, wall=0)
    posted(book, KEY, now=0)
    assert book.due(now=10, every_s=5) == []  # nothing repeated: the API holds count 1
    book.observe(KEY, "team-a", now=1, wall=1)
    assert book.due(now=4, every_s=5) == []
    [series] = book.due(now=5, every_s=5)
    series.written, series.written_at = series.count, 5
    book.observe(KEY, "team-a", now=6, wall=6)
    assert book.due(now=9, every_s=5) == []
    assert [s.count for s in book.due(now=10, every_s=5)] == [3]


def test_the_book_forgets_the_oldest_series_beyond_its_bound() -> None:
    book = EventBook(max_series=3, per_namespace=Limit(100, 0), overall=Limit(100, 0))
    for i in range(5):
        book.observe(key(str(i)), "team-a", now=i, wall=i)
        posted(book, key(str(i)), now=i)
    assert book.observe(key("4"), "team-a", now=5, wall=5) is Verdict.REPEAT
    assert book.observe(key("0"), "team-a", now=5, wall=5) is Verdict.NEW


def test_a_token_bucket_refills_to_its_burst_and_not_beyond() -> None:
    bucket = TokenBucket(Limit(burst=2, per_s=1), tokens=2, at=0)
    assert [bucket.take(0), bucket.take(0), bucket.take(0)] == [True, True, False]
    assert [bucket.take(100), bucket.take(100), bucket.take(100)] == [True, True, False]

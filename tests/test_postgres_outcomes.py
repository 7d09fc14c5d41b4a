"""A PostgreSQL put's entries come back from `a2e_put_group_logged` as text, read once into typed
outcomes (`PutOutcome`), and a request's answer is made from those: stored, refused, the
entries evicted, or the request's failure."""

from __future__ import annotations

from host.store.growth import PutOutcomes, evicted_by
from host.store.postgres.batch import BatchError
from host.store.postgres.writes import PutOutcome, PutStatus, request_outcomes
from host.store.records import Refusal


def test_each_form_of_the_functions_outcome_reads_as_its_status() -> None:
    """NULL is stored, 'evicted:<n>' stored after n evictions, 'error: ...' a failure with its
    message, a refusal's code that refusal."""
    assert PutOutcome.parse(None).status is PutStatus.STORED
    assert PutOutcome.parse("evicted:3") == PutOutcome(PutStatus.EVICTED, evicted=3)
    assert PutOutcome.parse("error: boom: x") == PutOutcome(PutStatus.FAILED, error="boom: x")
    assert PutOutcome.parse("memory_full") == PutOutcome(PutStatus.REFUSED,
                                                         refusal=Refusal.MEMORY_FULL)


def test_a_request_answers_its_entries_outcomes() -> None:
    """Stored and evicting entries answer None, a refused one its refusal, and the evictions
    are counted; one failed entry fails the whole request with its message."""
    raw = [None, "evicted:2", "memory_full", "evicted:1"]
    answer = request_outcomes([PutOutcome.parse(o) for o in raw])
    assert isinstance(answer, PutOutcomes)
    assert list(answer) == [None, None, Refusal.MEMORY_FULL, None] and evicted_by(answer) == 3
    plain = request_outcomes([PutOutcome.parse(None), PutOutcome.parse("memory_full")])
    assert plain == [None, Refusal.MEMORY_FULL] and evicted_by(plain) == 0
    failed = request_outcomes([PutOutcome.parse(None), PutOutcome.parse("error: no room")])
    assert isinstance(failed, BatchError) and str(failed) == "no room"

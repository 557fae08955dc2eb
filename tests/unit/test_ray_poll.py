"""The Ray polling step (``jobstate.ray_poll``): what each look at a Ray Job adds to the wait and when it is over.
Times are a clock handed in, so every sequence is exact."""

from __future__ import annotations

import pytest

from airflow_distributed.jobstate.ray_poll import FINAL, GONE, OUTAGE, RayLook, RayPoll, job_ending

RUNNING = RayLook({"status": "RUNNING"})
UNREACHABLE = RayLook(unreachable=True)


def _verdicts(poll: RayPoll, looks: list[tuple[float, RayLook]]) -> list[str | None]:
    verdicts = []
    for now, look in looks:
        poll, verdict = poll.step(look, now)
        verdicts.append(verdict)
    return verdicts


@pytest.mark.parametrize(("info", "ending"), [
    ({"status": "SUCCEEDED"}, FINAL), ({"status": "FAILED"}, FINAL), ({"status": "STOPPED"}, FINAL),
    ({"status": "RUNNING"}, None), ({"status": "PENDING"}, None), ({}, None), (None, GONE),
])
def test_a_final_state_or_a_missing_job_ends_the_wait(info, ending):
    assert job_ending(info) == ending
    assert RayPoll(10.0).step(RayLook(info), 0.0)[1] == ending


def test_the_api_may_stay_unreachable_for_the_budget_and_not_a_moment_longer():
    assert _verdicts(RayPoll(10.0), [(0.0, UNREACHABLE), (5.0, UNREACHABLE), (10.0, UNREACHABLE),
                                     (10.5, UNREACHABLE)]) == [None, None, None, OUTAGE]


def test_an_answered_look_ends_the_outage_and_the_next_one_counts_afresh():
    assert _verdicts(RayPoll(10.0), [(0.0, UNREACHABLE), (9.0, RUNNING), (15.0, UNREACHABLE),
                                     (24.0, UNREACHABLE), (25.5, UNREACHABLE)]) == [None, None, None, None, OUTAGE]


def test_a_failed_renewal_counts_against_the_budget_like_a_failed_read():
    # The job's state was read at each look, its renewal found the API unreachable: the look was not answered.
    renewal_dropped = [(now, RayLook({"status": "RUNNING"}, unreachable=True, renewed_at=now))
                       for now in (0.0, 6.0, 12.0)]
    assert _verdicts(RayPoll(10.0, renew_every=5.0), renewal_dropped) == [None, None, OUTAGE]
    # A read that failed, then a renewal that failed: one outage, whichever request found it.
    assert _verdicts(RayPoll(10.0, renew_every=5.0), [
        (0.0, UNREACHABLE), (11.0, RayLook({"status": "RUNNING"}, unreachable=True, renewed_at=11.0)),
    ]) == [None, OUTAGE]


def test_the_liveness_is_renewed_at_the_first_look_then_every_renew_every_seconds_answered_or_not():
    poll = RayPoll(10.0, renew_every=5.0)
    assert poll.renewal_due(0.0)
    poll, _ = poll.step(RayLook({"status": "RUNNING"}, unreachable=True, renewed_at=0.0), 0.1)
    assert not poll.renewal_due(4.9)
    assert poll.renewal_due(5.0)
    poll, _ = poll.step(RUNNING, 5.0)  # a look that renewed nothing keeps the last renewal's time
    assert poll.renewal_due(5.0)


def test_without_renew_every_nothing_is_renewed():
    assert not RayPoll(10.0).renewal_due(0.0)

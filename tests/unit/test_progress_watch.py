"""The hang watchdog's clock (``jobstate.progress_watch``): quiet for ``timeout`` is hung, any sign of life is not."""

from __future__ import annotations

import os

import pytest

from airflow_distributed.jobstate.progress_watch import HangWatchdog, ProgressWatch, document_mark, document_step


def test_quiet_for_the_timeout_is_hung_and_naming_the_last_step() -> None:
    watch = ProgressWatch(30, started_at=100)
    watch.observe((3, None), 12, now=100)
    watch.observe((3, None), 12, now=129.9)
    assert not watch.hung(129.9)
    assert watch.hung(130)
    assert watch.describe(141) == ("the job hung: the master reported no progress or metric and printed no line for "
                                   "41s (progress_timeout 30s) while every replica ran; its last step reported was "
                                   "12, 41s ago")


def test_a_line_or_a_report_each_within_the_timeout_keeps_a_slow_job_alive() -> None:
    watch = ProgressWatch(30, started_at=0)
    for now in range(0, 600, 20):
        watch.observe((now // 20, None), None, now=now)  # one more line every 20 s
        assert not watch.hung(now + 19)
    assert "it reported no step" in watch.describe(1000)


def test_the_first_timeout_counts_from_the_start() -> None:
    watch = ProgressWatch(5, started_at=10)
    assert not watch.hung(14.9) and watch.hung(15)


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_must_be_positive(timeout) -> None:
    with pytest.raises(ValueError, match="progress_timeout must be > 0"):
        ProgressWatch(timeout, started_at=0)


def test_what_of_the_document_counts() -> None:
    document = {"metrics": {"loss": 0.5}, "history": [{"step": 1}, {"step": 2, "loss": 0.5}],
                "progress": {"step": 7, "total": 10}}
    assert document_mark(document) == ({"step": 7, "total": 10}, {"loss": 0.5}, [{"step": 2, "loss": 0.5}], None)
    assert document_mark({**document, "reported_at": 1.5})[-1] == 1.5  # any report is a sign of life
    assert document_step(document) == 7
    assert document_step({"history": [{"step": 2}]}) == 2
    assert document_step({"metrics": {}, "history": []}) is None


def test_the_watchdog_of_a_ray_jobs_driver_names_the_last_report_of_a_burst_and_times_the_silence_from_it(
        tmp_path) -> None:
    """The watchdog as the Ray driver builds it (the master's document read where it is written, its lines counted
    without the live records), over a real master process that reports steps 1 to 10 within one live record interval
    and then blocks."""
    import subprocess
    import sys
    import time

    from airflow_distributed.contract import ENV_OUTPUT
    from tests.conftest import ROOT
    from tests.hang_scripts import BURST_THEN_BLOCK, last_report_named

    output = tmp_path / "output.json"
    master = subprocess.Popen([sys.executable, "-c", BURST_THEN_BLOCK], cwd=ROOT, stdout=subprocess.DEVNULL,
                              env={**os.environ, ENV_OUTPUT: str(output), "PYTHONPATH": str(ROOT)})
    try:
        hang = HangWatchdog(3, read_document=lambda: output.read_text() if output.exists() else None,
                            master_lines=lambda: 0)
        while (why := hang()) is None:
            assert master.poll() is None
            time.sleep(0.1)  # the driver's poll interval
    finally:
        master.kill()
        master.wait()
    last_report_named(why, 3)

"""The master's output document as the task reads it: strict JSON within the documented limits, whatever it says.

Every backend and sensor reads it through ``parse_output_document``; what comes out goes to XComs, asset events,
OpenLineage facets, the task log and the job view, all of which need strict JSON (``allow_nan=False``).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_distributed import tracking
from airflow_distributed.backends.local_live import LiveJobReport
from airflow_distributed.outputs import (
    DOCUMENT_LIMIT,
    DOCUMENT_TEXT_LIMIT,
    HISTORY_POINTS,
    UNREADABLE,
    WARNINGS,
    document_warning,
    job_record,
    job_result,
    parse_output_document,
    sanitise_document,
)
from airflow_distributed.status import ReplicaState, ReplicaStatus, progress_text
from airflow_distributed.strict_json import MAX_DEPTH, MAX_STRING, strict_number

# A hand-written document with everything a master can get wrong while its job still succeeds.
BAD = (
    '{"metrics": {"loss": NaN, "accuracy": 0.9, "best": Infinity, "worst": -Infinity, "huge": 1e999,'
    ' "count": ' + "9" * 5000 + ', "big": 18446744073709551616,'
    ' "nested": {"a": {"b": {"c": {"d": {"e": NaN, "f": 1.5}}}}}, "name": "run\\u0000\\ud800"},'
    ' "model_path": "/models/run-1",'
    ' "history": [{"step": 1, "loss": NaN}, "garbage", {"step": 2, "loss": Infinity}, {"step": 3, "loss": 0.5}],'
    ' "progress": {"step": 5, "total": 10, "percent": "10", "eta_seconds": 1e999}}'
)


def strict(value):
    """What Airflow does to an XCom: strict JSON, or an error."""
    return json.loads(json.dumps(value, allow_nan=False))


def test_a_bad_document_becomes_strict_json_with_nulls_and_a_warning_naming_where():
    document = parse_output_document(BAD)

    assert document["metrics"] == {
        "loss": None, "accuracy": 0.9, "best": None, "worst": None, "huge": None, "count": None,
        "big": 1.8446744073709552e19, "nested": {"a": {"b": {"c": {"d": {"e": None, "f": 1.5}}}}},
        "name": "run\ufffd\ufffd"}
    assert document["model_path"] == "/models/run-1"
    assert document["history"] == [{"step": 1, "loss": None}, {"step": 2, "loss": None}, {"step": 3, "loss": 0.5}]
    assert document["progress"] == {"step": 5, "total": 10, "percent": None, "eta_seconds": None}
    warning = document_warning(document)
    assert warning is not None and warning.startswith("the master's output document was sanitised: ")
    assert "progress.percent" in warning and "progress.eta_seconds" in warning and "more" in warning
    result = job_result(job_name="j", framework="pytorch", backend="local", state="succeeded", document=document,
                        replicas=[])
    record = job_record(result, document, 1.0)
    assert strict(result) == result and strict(record) == record  # neither XCom push can fail
    assert "logs" not in record  # a replica's lines are the task log's, never an XCom's
    assert progress_text(record["progress"]) == "(5/10 steps)"  # nothing to say of a percent it got wrong


@pytest.mark.parametrize(("text", "why"), [
    ("{", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ("garbage", "not JSON (Expecting value at line 1 column 1)"),
    ("\x00\x01\xff", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('"metrics"', "not a JSON object"),
    ("[" * 100_000, "nested too deeply"),
    (" " * (DOCUMENT_TEXT_LIMIT + 1), None),  # blank: no document, not a broken one
    ('{"metrics": {}}' + " " * DOCUMENT_TEXT_LIMIT, "larger than 16 MiB"),
])
def test_a_document_that_cannot_be_read_gives_no_metrics_and_says_why(text, why):
    document = parse_output_document(text)

    assert (document["metrics"], document["model_path"], document["history"]) == ({}, None, [])
    if why is None:
        assert document_warning(document) is None
        return
    assert document[UNREADABLE] is True
    assert why in document_warning(document)
    assert "garbage" not in document_warning(document)  # never the text itself: it may hold a secret


@pytest.mark.parametrize(("document", "expected", "warned"), [
    # a tracking.log_progress record is left as it is
    ({"step": 450, "total": 1000, "percent": 45.0, "eta_seconds": 130.0},
     {"step": 450, "total": 1000, "percent": 45.0, "eta_seconds": 130.0}, False),
    ({"step": 1, "total": 3, "percent": 33.3, "eta_seconds": None},
     {"step": 1, "total": 3, "percent": 33.3, "eta_seconds": None}, False),
    ({"percent": 150, "eta_seconds": 10}, {"percent": 100.0, "eta_seconds": 10}, False),
    ({"step": 1.5, "total": True, "percent": [10], "eta_seconds": -3}, {"step": None, "total": None, "percent": None,
                                                                       "eta_seconds": None}, True),
    ({"step": 2**70, "other": "x"}, {"step": None}, True),
    ("50%", None, True),
    (None, None, False),
])
def test_progress_keeps_only_its_fields_each_of_the_right_kind(document, expected, warned):
    parsed = sanitise_document({"progress": document})

    assert parsed.get("progress") == expected
    assert (WARNINGS in parsed) is warned


def test_wrong_types_at_the_top_are_ignored_not_fatal():
    parsed = sanitise_document({"metrics": [1, 2], "model_path": {"s3": "x"}, "history": "all of it"})

    assert (parsed["metrics"], parsed["model_path"], parsed["history"]) == ({}, None, [])
    assert document_warning(parsed).count("ignored") == 3


def test_deep_values_long_strings_and_long_histories_are_cut_to_the_limits():
    deep: dict = {"leaf": 1}
    for _ in range(3 * MAX_DEPTH):
        deep = {"x": deep}
    points = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(5 * HISTORY_POINTS)]

    parsed = sanitise_document({"metrics": {"deep": deep, "long": "y" * (3 * MAX_STRING)}, "history": points})

    assert depth(parsed) == MAX_DEPTH
    assert len(parsed["metrics"]["long"]) == MAX_STRING
    history = parsed["history"]
    assert len(history) == HISTORY_POINTS and history[0] == points[0] and history[-1] == points[-1]
    assert "nested more than" in document_warning(parsed) and "cut to" in document_warning(parsed)


def test_a_report_over_its_size_limit_is_cut_where_the_budget_ends_and_a_return_value_is_whole_or_none():
    metrics = {f"m{i:06d}": "z" * 1000 for i in range(2 * DOCUMENT_LIMIT // 1000)}

    parsed = sanitise_document({"model_path": "s3://b/m", "metrics": metrics, "return_value": [1, 2, 3],
                                "history": [{"step": 1}]})

    assert len(json.dumps({k: v for k, v in parsed.items() if k != WARNINGS})) <= DOCUMENT_LIMIT
    kept = list(parsed["metrics"])
    assert 0 < len(kept) < len(metrics) and kept == list(metrics)[:len(kept)]  # the first ones, in order
    assert parsed["model_path"] == "s3://b/m"  # comes before the metrics: always kept
    assert parsed["return_value"] is None and parsed["history"] == []  # come after: no room left
    assert "over its size limit" in document_warning(parsed)
    # A return value that does not fit whole is none rather than a shorter, different value.
    cut = sanitise_document({"return_value": list(range(DOCUMENT_LIMIT))})
    assert cut["return_value"] is None


@pytest.mark.parametrize(("value", "expected"), [
    (1, 1), (-2**63, -2**63), (2**63, 9.223372036854776e18), (10**400, None), (1.5, 1.5), (float("nan"), None),
    (float("-inf"), None),
])
def test_strict_number(value, expected):
    assert strict_number(value) == expected


# ---------------------------------------------------------------------------------------------- properties

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**18, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(), st.text(min_size=MAX_STRING, max_size=MAX_STRING + 8),
)
jsonish = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=6), st.tuples(children, children),
                               st.dictionaries(st.text(max_size=8), children, max_size=6)),
    max_leaves=60,
)
documents = st.one_of(
    jsonish,
    st.fixed_dictionaries({}, optional={
        "metrics": jsonish, "model_path": jsonish, "history": st.lists(jsonish, max_size=300),
        "return_value": jsonish, "extra": jsonish,
        "progress": st.one_of(jsonish, st.fixed_dictionaries(
            {}, optional={key: json_scalars for key in ("step", "total", "percent", "eta_seconds")})),
    }),
)


def depth(value) -> int:
    """Containers nested in ``value``, itself included."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(documents)
def test_any_document_comes_out_strict_and_within_the_limits(document):
    text = json.dumps(document)  # NaN and Infinity as Python writes them, as a hand-written document may
    for parsed in (parse_output_document(text), sanitise_document(document) if isinstance(document, dict) else None):
        if parsed is None:
            continue
        report = {key: value for key, value in parsed.items() if key not in (WARNINGS, UNREADABLE)}
        written = json.dumps(report, allow_nan=False)  # raises on NaN, Infinity
        json.dumps(report, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
        assert "\\u0000" not in written
        assert len(written) <= DOCUMENT_LIMIT
        assert depth(report) <= MAX_DEPTH
        assert isinstance(parsed["metrics"], dict) and isinstance(parsed["history"], list)
        assert len(parsed["history"]) <= HISTORY_POINTS
        assert parsed["model_path"] is None or isinstance(parsed["model_path"], str)
        assert all(len(s) <= MAX_STRING for s in strings(report))
        assert len(json.dumps(parsed.get(WARNINGS, []))) < 2000
        result = job_result(job_name="j", framework="pytorch", backend="local", state="succeeded",
                            document=parsed, replicas=[])
        json.dumps(job_record(result, parsed, 0.0), allow_nan=False)
        if "progress" in parsed:
            progress_text(parsed["progress"])


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


# ---------------------------------------------------------------------------------------------- the live record


def test_the_live_record_of_a_running_job_is_strict_json_whatever_the_master_wrote():
    published: list[str] = []
    texts = iter([BAD, "{half a doc", BAD.replace('"accuracy": 0.9', '"accuracy": 0.95')])
    clock = [0.0]
    live = LiveJobReport(job_name="j", framework="pytorch", read_document=lambda: next(texts),
                         publish=lambda record: published.append(json.dumps(record, allow_nan=False)),
                         log=_Log(), interval=1.0, clock=lambda: clock[0])
    replicas = [ReplicaStatus("master-0", "master", 0, ReplicaState.RUNNING)]
    for _ in range(3):
        live(replicas)
        clock[0] += 1.0

    # The half-written one is skipped; the two whole ones differ, so both are published.
    assert [json.loads(record)["metrics"]["accuracy"] for record in published] == [0.9, 0.95]
    record = json.loads(published[0])
    assert record["progress"] == {"step": 5, "total": 10, "percent": None, "eta_seconds": None}
    assert record["history"][0] == {"step": 1, "loss": None}
    assert "logs" not in record  # a running job's lines are the task log's too


class _Log:
    def info(self, *args) -> None:
        args[0] % args[1:]  # formats as the logger would, so a progress line that cannot be written fails here


# ---------------------------------------------------------------------------------------------- the writer


def test_log_metrics_writes_strict_json_for_nan_infinity_and_huge_integers(master):
    tracking.log_metrics(step=1, loss=float("nan"), grad=float("inf"), seen=10**400, deep={"a": [float("-inf")]})

    text = master.output.read_text()
    assert "NaN" not in text and "Infinity" not in text
    written = json.loads(text)
    assert written["metrics"] == {"loss": None, "grad": None, "seen": None, "deep": {"a": [None]}}
    assert written["history"] == [{"step": 1, "loss": None, "grad": None, "seen": None, "deep": {"a": [None]}}]


def test_an_elastic_restart_carries_on_a_history_written_by_hand_with_nan(master, monkeypatch):
    master.output.write_text('{"metrics": {"loss": NaN}, "model_path": null, "history": [{"step": 1, "loss": NaN}]}')
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")

    tracking.log_metrics(step=2, loss=0.5)

    written = json.loads(master.output.read_text())
    assert written["history"] == [{"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]
    assert not math.isnan(written["metrics"]["loss"])

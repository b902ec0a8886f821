"""bench/harness/event_log.py: a task's Spark time from an event log's lines (the shape
Spark 4's listener writes, with Spark Connect's job tags)."""

from __future__ import annotations

import json

from bench.harness.event_log import summarise

TAGS = ("SparkConnect_OperationTag_User_u_Session_s_Operation_o,"
        "SparkConnect_OperationTag_User_u_Session_s_Tag_ckpt.tpch_views.{task}.e{epoch}.a1")


def _job(job: int, stages: list[int], t0: int, t1: int, task: str, epoch: int,
         execution: int | None) -> list[dict]:
    props = {"spark.job.tags": TAGS.format(task=task, epoch=epoch)}
    if execution is not None:
        props["spark.sql.execution.id"] = str(execution)
    return [{"Event": "SparkListenerJobStart", "Job ID": job, "Submission Time": t0,
             "Stage IDs": stages, "Properties": props},
            {"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": t1}]


def test_jobs_are_summed_per_task_and_epoch_with_overlaps_counted_once(tmp_path):
    plan = ("== Physical Plan ==\nExecute InsertIntoHadoopFsRelationCommand (3)\n"
            "+- * Project (2)\n")
    events = [
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
         "executionId": 7, "physicalPlanDescription": plan},
        {"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
         "executionId": 8, "physicalPlanDescription":
             "== Physical Plan ==\nAdaptiveSparkPlan (5)\n+- HashAggregate (4)\n"},
        *_job(1, [1, 2], 1000, 1500, "q6", 2, 7),
        *_job(2, [3], 1400, 1800, "q6", 2, 8),  # overlaps job 1 by 100 ms
        *_job(3, [4], 5000, 5100, "q6", 3, None),
        *_job(4, [5], 0, 9000, "untagged", 1, None),  # its tag replaced below
        {"Event": "SparkListenerTaskEnd", "Stage ID": 2, "Task Metrics":
            {"Executor Run Time": 300}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 3, "Task Metrics":
            {"Executor Run Time": 250}},
    ]
    events[-4]["Properties"]["spark.job.tags"] = "SparkConnect_OperationTag_User_u"
    log = tmp_path / "events_1_app"
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    found = summarise(tmp_path)
    assert set(found) == {("q6", 2), ("q6", 3)}
    e2 = found[("q6", 2)].as_json()
    assert e2["jobs"] == 2 and e2["jobs_ms"] == 800 and e2["executor_ms"] == 550
    assert e2["by_kind"] == {"Execute InsertIntoHadoopFsRelationCommand": {"jobs": 1,
                                                                           "ms": 500},
                             "HashAggregate": {"jobs": 1, "ms": 400}}
    assert found[("q6", 3)].as_json()["by_kind"] == {"(no SQL)": {"jobs": 1, "ms": 100}}

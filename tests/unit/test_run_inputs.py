"""What a job reads of its run, without Spark: the data root it needs."""

from __future__ import annotations

import pytest

from checkpointing import LocalStorage
from spark_jobs.runtime.run_inputs import RunInputs


def _run(data: LocalStorage | None) -> RunInputs:
    run = RunInputs.__new__(RunInputs)  # the attributes a data-root read touches
    run.data, run.input_prefixes = data, []
    return run


def test_a_job_that_needs_the_data_root_fails_in_one_line_naming_the_setting():
    run = _run(None)
    for read in (lambda: run.data_root, lambda: run.data_uri("raw/x.csv")):
        with pytest.raises(ValueError) as e:
            read()
        text = str(e.value)
        assert "\n" not in text and "--data" in text and "CKPT_DATA" in text, text
    assert run.input_prefixes == []  # nothing recorded as read


def test_the_data_root_is_the_run_s_storage(tmp_path):
    data = LocalStorage(tmp_path)
    run = _run(data)
    assert run.data_root is data
    assert run.data_uri("raw/x.csv").endswith("raw/x.csv") and run.input_prefixes == ["raw/x.csv"]

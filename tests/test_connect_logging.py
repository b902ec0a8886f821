"""What a Spark Connect client logs after a retry took over a killed attempt's work."""

from __future__ import annotations

import logging


def test_a_released_sessions_closing_noise_is_dropped_and_nothing_else():
    """After a retry released the killed attempt's Spark Connect session, pyspark's client
    warns once per pending release that the session is closed; those lines (not an error of
    the attempt that succeeded) are dropped, any other ReleaseExecute failure is kept."""
    from spark_jobs.runtime.reattach import quiet_closed_session_noise

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("pyspark.sql.connect.logging")
    handler = Keep()
    log.addHandler(handler)
    try:
        quiet_closed_session_noise()
        quiet_closed_session_noise()  # once is enough; twice adds nothing
        log.warning("ReleaseExecute failed with exception: (org.apache.spark.SparkSQLException) "
                    "[INVALID_HANDLE.SESSION_CLOSED] The handle 1 is invalid. Session was closed.")
        log.warning("ReleaseExecute failed with exception: UNAVAILABLE: connection refused.")
    finally:
        log.removeHandler(handler)
    assert seen == ["ReleaseExecute failed with exception: UNAVAILABLE: connection refused."]
    assert sum(type(f).__name__ == "_ClosedSessionNoise" for f in log.filters) == 1

"""What a Spark Connect client and server log: a retry's noise, a crash report."""

from __future__ import annotations

import logging


def test_a_released_sessions_closing_noise_is_dropped_and_nothing_else():
    """After a retry released the killed attempt's Spark Connect session, pyspark's client
    warns once per pending release that the session is closed; those lines (not an error of
    the attempt that succeeded) are dropped, any other ReleaseExecute failure is kept."""
    from spark_jobs.runtime.reattach import quiet_closed_session_noise

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("pyspark.sql.connect.logging", logging.WARNING, __file__, 1,
                                 msg, None, None)

    log = logging.getLogger("pyspark.sql.connect.logging")
    quiet_closed_session_noise()
    quiet_closed_session_noise()  # once is enough; twice adds nothing
    noise = [f for f in log.filters if type(f).__name__ == "_ClosedSessionNoise"]
    assert len(noise) == 1
    closed = record("ReleaseExecute failed with exception: (org.apache.spark.SparkSQLException) "
                    "[INVALID_HANDLE.SESSION_CLOSED] The handle 1 is invalid. Session was "
                    "closed.")
    other = record("ReleaseExecute failed with exception: UNAVAILABLE: connection refused.")
    unrelated = record("[INVALID_HANDLE.SESSION_CLOSED] seen in another message")
    assert log.filter(closed) is False or log.filter(closed) == 0
    assert log.filter(other) and log.filter(unrelated)


def test_a_servers_crash_report_goes_beside_its_log(tmp_path):
    """A JVM that crashes writes hs_err_pid<N>.log to its working directory unless told
    otherwise: the server's goes to its log's directory, not where it was started from."""
    from spark_jobs.runtime.connect_server import ConnectServer

    log = tmp_path / "logs" / "connect.log"
    cmd = ConnectServer(port=15999, log_path=log).command()
    [opts] = [c for c in cmd if c.startswith("spark.driver.extraJavaOptions=")]
    assert f"-XX:ErrorFile={log.parent}/hs_err_pid%p.log" in opts.split()
    assert "-Dlog4j2.level=WARN" in opts.split()  # the other options are kept

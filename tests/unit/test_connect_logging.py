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


def test_a_server_keeps_the_classes_it_generates_for_the_days_to_come(tmp_path):
    """A server runs the same queries every epoch: its cache of generated classes is sized
    for a pipeline's epochs (Spark's default of 100 is fewer than tpch_daily's shapes), and a
    deployment's own setting still wins."""
    from spark_jobs.runtime.connect_server import ConnectServer

    key = "spark.sql.codegen.cache.maxEntries"

    def value(server: ConnectServer) -> int:
        cmd = server.command()
        [setting] = [c for c in cmd if c.startswith(f"{key}=")]
        assert cmd[cmd.index(setting) - 1] == "--conf"
        return int(setting.split("=", 1)[1])

    assert value(ConnectServer(port=15999, log_path=tmp_path / "c.log")) >= 1000
    assert value(ConnectServer(port=15999, log_path=tmp_path / "c.log",
                               conf={key: "300"})) == 300

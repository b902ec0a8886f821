"""Resuming a killed attempt's Spark work (PROTOCOL 5.17, 6.3): a Spark Connect server keeps
running an operation when its client dies, so the next attempt can wait for it instead of
running it again.

Before a long action (a write) a task in connect mode chooses the operation's id, records
it with its session's id (:meth:`checkpointing.Coordinator.record_operation`) and starts
the action under that id. A retry that finds the record, when its job reaches the same
action, sends ``ReattachExecute`` for that operation on that session and reads the rest of
its response stream: the files are the ones the first attempt's operation wrote, and the
metrics its observations computed are copied onto the retry's observations. When the
server no longer holds the operation (it finished and was released, the session expired,
the server restarted) or the operation failed, the action simply runs again.

pyspark has no public call for either step; the two private hooks used are named where
they are used (``SparkConnectClient._execute_plan_request_with_metadata`` and its gRPC
stub), and a pyspark that lacks them degrades to running the action again."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from checkpointing.protocol.documents import now_iso
from checkpointing.protocol.operations import EngineOperation

log = logging.getLogger("spark_jobs.runtime.reattach")

ENGINE = "spark-connect"
_RELEASED = "INVALID_CURSOR.POSITION_NOT_AVAILABLE"


def new_operation(spark: Any, task_id: str, attempt: int, action: str, df: Any,
                  clock: float) -> EngineOperation:
    """The record of an action about to start on ``spark`` (a Spark Connect session)."""
    client = spark.client
    return EngineOperation(task_id, attempt, action, ENGINE, client._session_id,
                           str(uuid.uuid4()), now_iso(clock),
                           user_id=client._user_id or None,
                           observations=tuple(observations(df)))


def observations(df: Any) -> dict[str, Any]:
    """The observations (``DataFrame.observe``) a DataFrame's plan computes, by name, in
    the order the job declared them (the plan's own order)."""
    plan = getattr(df, "_plan", None)
    return dict(getattr(plan, "observations", None) or {})


#: The id the next ExecutePlan request built in this thread takes (:func:`operation_id`).
_NEXT_ID = threading.local()
_INSTALL = threading.Lock()


@contextlib.contextmanager
def operation_id(spark: Any, op_id: str) -> Iterator[None]:
    """Start the next action on ``spark`` in this thread as operation ``op_id``. pyspark
    builds every ExecutePlan request in ``_execute_plan_request_with_metadata(operation_id=
    None)`` and offers no public way to choose the id: the first request this thread builds
    inside the block gets it. The hook is per thread, so that a job's writes running at
    once (:meth:`~spark_jobs.runtime.JobRun.concurrently`) each take their own id."""
    client = spark.client
    with _INSTALL:
        if "_execute_plan_request_with_metadata" not in vars(client):
            build = client._execute_plan_request_with_metadata

            def with_id(operation_id: str | None = None) -> Any:
                pending = getattr(_NEXT_ID, "value", None)
                if pending is None or operation_id is not None:
                    return build(operation_id)
                _NEXT_ID.value = None
                return build(pending)

            client._execute_plan_request_with_metadata = with_id
    _NEXT_ID.value = op_id
    try:
        yield
    finally:
        _NEXT_ID.value = None


def _failed(m: Any) -> bool:
    """Whether observed metrics ``m`` report an error instead of figures (Spark 4.2's
    ``root_error_idx``; Spark 4.1's protocol has no such field, and never fails them)."""
    return "root_error_idx" in m.DESCRIPTOR.fields_by_name and m.HasField("root_error_idx")


def reattach(spark: Any, op: EngineOperation, df: Any) -> str | None:
    """Wait for operation ``op`` to finish and copy its observed metrics onto ``df``'s
    observations (matched by position: the same job declares them in the same order).
    Returns None when the operation completed, else why it could not be resumed (the
    caller then runs the action again)."""
    import grpc
    from pyspark.sql.connect.expressions import LiteralExpression
    from pyspark.sql.connect.proto import base_pb2 as pb2

    client = spark.client
    ours = dict(zip(op.observations, observations(df).values(), strict=False))
    req = pb2.ReattachExecuteRequest(session_id=op.session_id, operation_id=op.operation_id,
                                     client_type=client._builder.userAgent)
    if op.user_id:
        req.user_context.user_id = op.user_id
    for _ in range(10_000):  # a server ends a long stream now and then: attach again
        try:
            for resp in client._stub.ReattachExecute(req, metadata=client._builder.metadata()):
                req.last_response_id = resp.response_id
                for m in resp.observed_metrics:
                    obs = ours.get(m.name)
                    if obs is not None and obs._result is not None and not _failed(m):
                        obs._result.update({k: LiteralExpression._to_value(v)
                                            for k, v in zip(m.keys, m.values, strict=False)})
                if resp.HasField("result_complete"):
                    _release_execute(client, op)
                    if any(not o._result for o in ours.values()):
                        # The killed client had read (and released) the responses that
                        # carried them: the figures are lost, the action must run again.
                        return "its observed metrics went to the killed attempt"
                    return None
        except grpc.RpcError as exc:
            error_class, params = _error_info(exc)
            if error_class != _RELEASED or not params.get("responseId"):
                return f"{error_class or exc.code().name}: {_first_line(exc)}"
            # Responses the dead client consumed and released: continue after them.
            req.last_response_id = params["responseId"]
    return "the operation's stream never completed"


class _ClosedSessionNoise(logging.Filter):
    """Drops pyspark's "ReleaseExecute failed ... INVALID_HANDLE.SESSION_CLOSED" warnings.

    The client releases each operation's buffered results in background threads; once the
    session is released (by the task at its end, or by a retry releasing the killed
    attempt's), the server has dropped them all, and those releases still pending fail so:
    lines at error level in the log of a task that succeeded, in every task through Spark
    Connect. Any other ReleaseExecute failure is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not ("ReleaseExecute failed" in msg and "SESSION_CLOSED" in msg)


_NOISE = _ClosedSessionNoise()


def quiet_closed_session_noise() -> None:
    """Install the filter on pyspark's Connect client logger (once)."""
    target = logging.getLogger("pyspark.sql.connect.logging")
    if _NOISE not in target.filters:
        target.addFilter(_NOISE)


def release_session(spark: Any, session_id: str, user_id: str | None) -> None:
    """Release a dead client's session on the server (its cached data, any operation of it
    still running); nothing when the server no longer holds it."""
    import grpc
    from pyspark.sql.connect.proto import base_pb2 as pb2

    quiet_closed_session_noise()
    client = spark.client
    if session_id == client._session_id:
        # The earlier attempt ran in this very session (an embedded driver retrying in its
        # process): releasing it would close the session this attempt still uses.
        return
    req = pb2.ReleaseSessionRequest(session_id=session_id, client_type=client._builder.userAgent)
    if user_id:
        req.user_context.user_id = user_id
    try:
        client._stub.ReleaseSession(req, metadata=client._builder.metadata())
    except grpc.RpcError as exc:
        log.info("session of the killed attempt not released: %s", _first_line(exc))


def _release_execute(client: Any, op: EngineOperation) -> None:
    """Let the server drop the operation's buffered responses now (not at its timeout)."""
    import grpc
    from pyspark.sql.connect.proto import base_pb2 as pb2

    req = pb2.ReleaseExecuteRequest(session_id=op.session_id, operation_id=op.operation_id,
                                    client_type=client._builder.userAgent)
    req.release_all.CopyFrom(pb2.ReleaseExecuteRequest.ReleaseAll())
    if op.user_id:
        req.user_context.user_id = op.user_id
    with contextlib.suppress(grpc.RpcError):
        client._stub.ReleaseExecute(req, metadata=client._builder.metadata())


def _error_info(exc: Any) -> tuple[str | None, dict[str, str]]:
    """(error class, message parameters) of a Spark Connect gRPC error, from the
    ``ErrorInfo`` the server attaches."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    try:
        status = rpc_status.from_call(exc)
    except Exception:  # noqa: BLE001 - a malformed status: no details
        status = None
    for d in status.details if status else ():
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            try:
                params = json.loads(info.metadata.get("messageParameters") or "{}")
            except ValueError:
                params = {}
            return info.metadata.get("errorClass"), params
    return None, {}


def _first_line(exc: Any) -> str:
    details = getattr(exc, "details", lambda: "")() or str(exc)
    return details.strip().splitlines()[0][:200] if details.strip() else type(exc).__name__

"""The authoring API without a running Airflow: the import contract between layers, jobs by
reference, the plan derived from the DAG, the TaskFlow decorator, the provider metadata, and
plan changes against the parent epoch (Flink's allowNonRestoredState)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness.airflow_env import airflow, airflow_env
from checkpointing import CheckpointConfig, Coordinator, LocalStorage, TaskPlan
from checkpointing.coordination.coordinator import RestoreMappingError

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("layer, forbidden", [
    ("plugins", ("spark_jobs.flights",)),            # the provider knows no pipeline
    ("spark_jobs/runtime", ("spark_jobs.flights", "airflow", "dag_checkpoints")),
    ("checkpointing", ("airflow", "pyspark", "spark_jobs", "dag_checkpoints")),
    ("bench", ("tests",)),  # the suite imports the benchmarks and their harness, not back
])
def test_import_contract(layer, forbidden):
    bad = {f"{p.relative_to(ROOT)}: {m}" for p in (ROOT / layer).rglob("*.py")
           for m in _imports(p) if m.startswith(forbidden)}
    assert not bad, sorted(bad)


PACKAGES = {"checkpointing": "checkpointing", "dag_checkpoints": "plugins/dag_checkpoints",
            "spark_jobs": "spark_jobs", "bench": "bench"}


def _module_graph() -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports (at module level or inside a
    function: a deferred import hides a cycle, it does not remove it)."""
    files = {}
    for pkg, root in PACKAGES.items():
        for f in (ROOT / root).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / root).with_suffix("").parts
                     if p != "__init__"]
            files[".".join([pkg, *parts])] = f
    graph = {}
    for name, f in files.items():
        base = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = ".".join(base[:len(base) - node.level + 1] + [node.module or ""]) \
                    if node.level else node.module or ""
                names = [target.rstrip("."), *(f"{target}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            deps.update(n for n in names if n in files and n != name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


#: the core's rooms, lowest first: a module imports only from its own room or a lower one
#: (the top-level modules errors, ids, config, extras, redaction and storage/ are the
#: ground floor; ckpt, the command line, is the roof)
LAYERS = ("storage", "protocol", "records", "views", "tables", "ivm", "state", "coordination")


def _room(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "checkpointing" or len(parts) < 2:
        return -1
    if len(parts) == 2:
        return {"ckpt": len(LAYERS), "storage": 0}.get(parts[1], -1)
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else -1


def test_the_core_s_rooms_import_only_downwards():
    """checkpointing/ is a stack of subpackages; an arrow that points up (a table format
    reaching into the coordinator, the protocol into the read side) fails here."""
    graph = _module_graph()
    assert _room("checkpointing.tables.delta") > _room("checkpointing.protocol.barrier")
    up = [f"{m} -> {d}" for m, deps in graph.items() for d in deps
          if _room(m) >= 0 and _room(d) > _room(m)]
    assert not up, up
    flat = sorted(f.name for f in (ROOT / "checkpointing").glob("*.py"))
    assert len(flat) <= 8, flat



#: the provider's rooms by where their code runs, and the rooms each may import from. The
#: task's process never loads the api-server's code, and the reverse; ``shared`` runs
#: anywhere, so it reaches into neither (``wiring`` builds a DAG of the operators' classes);
#: triggers run in the triggerer, so they import no task code.
PROVIDER_ROOMS = {
    "task": {"task", "shared", "hooks", "notifications"},
    "server": {"server", "shared", "hooks", "notifications"},
    "shared": {"shared", "hooks", "notifications", "operators"},
    "operators": {"operators", "task", "shared", "hooks", "triggers", "notifications"},
    "decorators": {"decorators", "operators"},
    "triggers": {"triggers", "shared", "hooks", "notifications"},
    "hooks": {"hooks", "shared", "notifications"},
    "notifications": {"notifications"},
}
#: the top level of the provider: its package, the provider metadata Airflow reads
PROVIDER_TOP = {"dag_checkpoints", "dag_checkpoints.provider"}


def test_the_provider_s_rooms_say_where_code_runs():
    """Every provider module is in a room (task, server, shared, or one of Airflow's
    provider folders), and a room imports only from the rooms that run where it runs."""
    graph = _module_graph()
    ours = {m for m in graph if m.split(".")[0] == "dag_checkpoints"}
    loose = sorted(m for m in ours if m not in PROVIDER_TOP
                   and m.split(".")[1] not in PROVIDER_ROOMS)
    assert not loose, loose
    wrong = [f"{m} -> {d}" for m in ours - PROVIDER_TOP for d in graph[m]
             if d.startswith("dag_checkpoints.") and d not in PROVIDER_TOP
             and d.split(".")[1] not in PROVIDER_ROOMS[m.split(".")[1]]]
    assert not wrong, wrong
    assert "dag_checkpoints.task.task_epoch" in ours and "dag_checkpoints.server.api" in ours

def test_no_import_cycles():
    graph = _module_graph()
    # the graph is real
    assert "checkpointing.coordination.epoch_store" in \
        graph["checkpointing.coordination.coordinator"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles(graph) == []


#: the modules allowed to name a table format: its traits, its registry, its implementation
FORMAT_MODULES = {"checkpointing/protocol/table_formats.py",
                  "checkpointing/tables/format_registry.py",
                  "checkpointing/tables/delta.py", "checkpointing/tables/iceberg.py"}


def test_only_the_format_modules_name_a_format():
    """One place per table format: elsewhere a difference between formats is a trait
    (checkpointing.protocol.table_formats) or the format's implementation
    (checkpointing.tables.format_registry), never a comparison of its name."""
    found = []
    for root in ("checkpointing", "spark_jobs", "plugins", "dags"):
        for f in (ROOT / root).rglob("*.py"):
            rel = f.relative_to(ROOT).as_posix()
            if rel in FORMAT_MODULES:
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if re.search(r"""format\s*(==|!=|in)\s*[("']""", line) or \
                        re.search(r"""["'](delta|iceberg)["']\s*(==|!=)""", line):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found


#: a coordinator's parts that are the library's own: its storage, key layout, stores
PRIVATE = {"storage", "layout", "store"}


def _is_coordinator(node: ast.expr) -> bool:
    """``coord``, ``coordinator``, ``self.coordinator``, ``hook.get_coordinator()``..."""
    if isinstance(node, ast.Call):
        return _is_coordinator(node.func)
    name = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""
    return name.startswith(("coord", "get_coordinator")) or name in ("c", "cw")


def _reach_throughs(source: str) -> list[str]:
    """Where ``source`` reaches through a coordinator into checkpoint storage: one of its
    private parts, any key layout, or the layout module itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (
                node.attr == "layout" or node.attr in PRIVATE and _is_coordinator(node.value)):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("checkpointing.protocol.layout", "checkpointing.coordination.epoch_store",
                 "checkpointing.protocol.attempts")):
            found.append(f"{node.lineno}: import {node.module}")
    return found


def test_callers_reach_checkpoint_storage_only_through_the_coordinator():
    """The coordinator is the only way in: the runtime, the provider and the DAGs use its
    methods, its read-only catalog and an attempt's task storage, never its storage or
    key layout (PROTOCOL 4's keys stay in checkpointing/)."""
    assert _reach_throughs("read_manifest(coord.storage, coord.layout)") == \
        ["1: .storage", "1: .layout"]
    assert _reach_throughs("CheckpointHook(s).get_coordinator().storage.list('')\n"
                           "settings.storage") == \
        ["1: .storage"]
    found = [f"{f.relative_to(ROOT)}:{hit}" for root in ("spark_jobs", "plugins", "dags")
             for f in (ROOT / root).rglob("*.py") for hit in _reach_throughs(f.read_text())]
    assert not found, found


def test_no_function_in_the_core_is_over_80_lines():
    """Small rooms: a function of checkpointing/ that grows past 80 lines does several
    jobs; split it along them."""
    long = []
    for f in (ROOT / "checkpointing").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_jobs_by_reference():
    from spark_jobs.flights.stats import route_stats
    from spark_jobs.runtime import JobReferenceError, job_reference, resolve_job

    assert job_reference(route_stats) == "spark_jobs.flights.stats:route_stats"
    assert resolve_job("spark_jobs.flights.stats:route_stats") is route_stats
    with pytest.raises(JobReferenceError, match="cannot import 'no_such_pkg.jobs'"):
        resolve_job("no_such_pkg.jobs:fn")
    with pytest.raises(JobReferenceError, match="has no 'nope'"):
        resolve_job("spark_jobs.flights.stats:nope")
    with pytest.raises(JobReferenceError, match="is not 'package.module:function'"):
        job_reference("spark_jobs/flights/stats.py")
    with pytest.raises(JobReferenceError, match="not a module-level function"):
        job_reference(lambda run: None)


def test_plan_is_derived_from_the_dag_through_plain_tasks():
    from airflow.sdk import DAG
    from airflow.sdk.bases.operator import BaseOperator
    from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

    class Plain(BaseOperator):
        def execute(self, context):  # pragma: no cover - never run here
            return None

    with DAG("authoring_test", schedule=None) as dag:
        a = CheckpointedSparkOperator(task_id="a", job="spark_jobs.flights.stats:route_stats")
        gate = Plain(task_id="gate")  # a plain task between two checkpointed ones
        b = CheckpointedSparkOperator(task_id="b", job="spark_jobs.flights.stats:route_stats",
                                      outputs=["gold_b"])
        c = CheckpointedSparkOperator(task_id="c", job="spark_jobs.flights.stats:route_stats")
        a >> gate >> b
        a >> c
    steps = checkpoint_dag(dag, CheckpointSettings("authoring_test", storage="file:///tmp/x"))
    assert steps.plan == {"a": TaskPlan((), False), "b": TaskPlan(("a",), True),
                          "c": TaskPlan(("a",), False)}
    # The root job begins or joins the epoch itself: it starts with the begin step, not
    # after it (PROTOCOL 6.1, 1.10); the watchdog and the commit step read the begin's XCom.
    assert {t.task_id for t in steps.begin.downstream_list} == {"checkpoint_commit",
                                                               "checkpoint_timeout"}
    assert a.upstream_list == [] and a.epoch_plan == steps.plan
    # The commit step waits beside the jobs (deferred), not after them: the last leaf's
    # acknowledgement completes the epoch (PROTOCOL 6.5); it knows the jobs to wait for.
    assert [t.task_id for t in steps.commit.upstream_list] == ["checkpoint_begin"]
    assert steps.commit.job_task_ids == ["a", "b", "c"]
    # Retried: Airflow can fail a task resumed right after it deferred (a stale executor
    # event); the step is idempotent.
    assert steps.commit.retries == 2 and steps.watchdog.retries == 2
    assert [x.name for x in steps.commit.outlets] == ["authoring_test.gold_b"]
    assert all(t.settings is not None for t in (a, b, c))
    # Every step knows its DAG: the dag_id tag of the metrics it emits (METRICS.md).
    steps_and_jobs = (a, b, c, steps.begin, steps.commit, steps.watchdog)
    assert {t.settings.dag_id for t in steps_and_jobs} == {"authoring_test"}


def test_a_pipeline_id_is_claimed_by_one_dag_per_storage():
    from airflow.sdk import DAG
    from dag_checkpoints import CheckpointedSparkOperator, CheckpointSettings, checkpoint_dag

    def dag_with(dag_id: str, storage: str) -> None:
        with DAG(dag_id, schedule=None) as dag:
            CheckpointedSparkOperator(task_id="a", job="spark_jobs.flights.stats:route_stats")
        checkpoint_dag(dag, CheckpointSettings("claimed_pipeline", storage=storage))

    dag_with("claim_one", "file:///tmp/claims")
    dag_with("claim_one", "file:///tmp/claims/")  # the same DAG parsed again: fine
    dag_with("claim_two", "file:///tmp/other")  # the same id on other storage: fine
    with pytest.raises(ValueError, match="already used by DAG 'claim_one'"):
        dag_with("claim_two", "file:///tmp/claims")


def test_taskflow_decorator_makes_a_checkpointed_task():
    from airflow.sdk import DAG
    from dag_checkpoints.decorators import checkpointed_spark_task

    def count_rows(run):
        return None

    with DAG("taskflow_test", schedule=None) as dag:
        checkpointed_spark_task(outputs=["gold_counts"])(count_rows)()
    op = dag.get_task("count_rows")
    assert op.is_checkpointed and op.outputs == ("gold_counts",) and op.publishes
    assert op.job_callable() is count_rows
    with DAG("taskflow_args", schedule=None), pytest.raises(TypeError, match="takes no arg"):
        checkpointed_spark_task(count_rows)(1)


def test_removed_task_with_state_is_refused_unless_allowed(tmp_path, caplog):
    from tests.support.helpers import ack_task

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p", CheckpointConfig())
    plan = {"a": TaskPlan(), "b": TaskPlan(("a",), True)}
    e = c.begin_epoch(plan, "r1").epoch_id
    for t in plan:
        ack_task(c, e, t, files={"s": t.encode()}, tmp=tmp_path)
    c.complete(e)
    with pytest.raises(RestoreMappingError, match=r"task\(s\) \['b'\].*allow non-restored"):
        c.begin_epoch({"a": TaskPlan()}, "r2")
    grown = {**plan, "new": TaskPlan(("a",))}
    e2 = c.begin_epoch(grown, "r3").epoch_id  # a new task starts empty
    assert "['new'] are not in parent epoch 1" in caplog.text
    assert c.restore_handle(e2, "new") is None and c.restore_handle(e2, "b") is not None
    c.abort(e2, "cancelled")
    e3 = c.begin_epoch({"a": TaskPlan()}, "r4", allow_non_restored_state=True).epoch_id
    assert c.barrier(e3).parent_epoch_id == 1


def test_provider_and_plugin_are_registered(tmp_path):
    env = airflow_env(tmp_path / "airflow")
    r = airflow(env, "providers", "list", "--output", "json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(r.stdout[r.stdout.index("["):])}
    assert "dag-checkpoints" in providers, sorted(providers)
    r = airflow(env, "plugins", "--output", "json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    plugins = json.loads(r.stdout[r.stdout.index("["):])
    assert [p["name"] for p in plugins].count("dag_checkpoints") == 1, plugins
    code = ("from airflow.sdk import task; "
            "print(task.checkpointed_spark.__module__)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.stdout.strip() == "dag_checkpoints.decorators.checkpointed_spark", r.stderr[-2000:]


def _untyped_seams(source: str, names: str = r"coord\w*|store|epochs|epoch_store"
                   ) -> list[str]:
    """Parameters of ``source``'s functions that stand for a coordinator, a store or an
    epoch reader (or whatever ``names`` matches) and are not given a narrow type (missing,
    or ``Any``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if not re.fullmatch(names, a.arg):
                continue
            kind = ast.unparse(a.annotation) if a.annotation else ""
            if kind in ("", "Any", "object"):
                found.append(f"{node.lineno}: {node.name}({a.arg}: {kind or '?'})")
    return found


def test_no_core_function_takes_an_untyped_coordinator_or_store():
    """A collaborator is passed in as the narrow interface it is used through (an
    EpochReader, an EpochStore, a Protocol naming what it needs), as Flink passes a
    CompletedCheckpointStore rather than the coordinator: never untyped, never Any."""
    assert _untyped_seams("def f(coordinator, x: int): ...\ndef g(store: Any): ...") == \
        ["1: f(coordinator: ?)", "2: g(store: Any)"]
    assert _untyped_seams("def f(epochs: EpochReader): ...") == []
    found = [f"{f.relative_to(ROOT)}:{hit}" for f in (ROOT / "checkpointing").rglob("*.py")
             for hit in _untyped_seams(f.read_text())]
    assert not found, found


def test_the_provider_holds_a_typed_coordinator_and_context():
    """Where the provider holds a coordinator it is a ``Coordinator`` (or a narrower
    interface), and a task's context is Airflow's ``Context`` (or a ``Mapping`` where a
    deadline callback's plain dict comes too): never untyped, never ``Any``."""
    names = r"coord\w*|store|epochs|epoch_store|context"
    assert _untyped_seams("def f(self, context): ...", names) == ["1: f(context: ?)"]
    found = [f"{f.relative_to(ROOT)}:{hit}"
             for f in (ROOT / "plugins/dag_checkpoints").rglob("*.py")
             for hit in _untyped_seams(f.read_text(), names)]
    assert not found, found

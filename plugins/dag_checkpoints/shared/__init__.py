"""Code every process may run: a DAG's checkpoint settings and their wiring into the DAG
(the DAG processor and each task parse it), a run's configuration, the expected inputs,
the timeout rule (the watchdog task, its trigger and the deadline callback in the
triggerer), metrics, lineage and published assets. It imports neither ``task`` nor
``server``."""

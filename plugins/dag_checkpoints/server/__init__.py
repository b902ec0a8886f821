"""Code that runs in Airflow's long-lived processes, never in a task: the plugin and its
REST routes and Epochs page (api-server), the DAG-run listener and the staleness watch
(scheduler), backfills from a checkpoint, the calls to Airflow's own REST API, the
``ckpt-airflow`` command line, and the fixes applied to the installed Airflow."""

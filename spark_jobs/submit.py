"""Entry point for spark-submit on a cluster:

    spark-submit --master spark://HOST:7077 --py-files ckpt_jobs.zip spark_jobs/submit.py \\
        ingest_flights --storage URI --pipeline ID --data URI --epoch N --attempt K

The zip holds the ``checkpointing`` and ``spark_jobs`` packages (``make jobs-zip``); the
script imports them absolutely because spark-submit runs it as a plain file.
"""

import sys

from spark_jobs.cli import main
from spark_jobs.pipeline import JOBS

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        print(f"usage: submit.py {{{','.join(JOBS)}}} --storage ... (see spark_jobs/cli.py)",
              file=sys.stderr)
        sys.exit(2)
    task = sys.argv[1]
    sys.exit(main(JOBS[task], task, ["--task", task, *sys.argv[2:]]))

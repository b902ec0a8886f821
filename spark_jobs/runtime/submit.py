"""The generic application file for spark-submit (a plain file: absolute imports only):

    spark-submit --master spark://HOST:7077 --py-files jobs.zip spark_jobs/runtime/submit.py \\
        --job my_pkg.jobs:sessionize --storage URI --pipeline ID --data URI --epoch N \\
        --task sessionize --attempt K

The zip (``spark_jobs.runtime.package.build_jobs_zip``) holds ``checkpointing``,
``spark_jobs`` and the job's own top-level package.
"""

import sys

from spark_jobs.runtime.entry import main

if __name__ == "__main__":
    sys.exit(main())

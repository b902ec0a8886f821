"""``python -m spark_jobs.runtime --job package.module:function --storage ... --epoch N``."""

import sys

from spark_jobs.runtime.entry import main

sys.exit(main())

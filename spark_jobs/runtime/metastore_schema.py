"""The tables of Spark's metastore on PostgreSQL, created before any Spark uses them.

Hive's metastore client, which Spark's session catalog runs on, creates its tables as it
first needs them (DataNucleus's ``autoCreateAll``). On PostgreSQL that deadlocks the first
``CREATE TABLE``: inside the transaction that inserts the table's row, a second connection
creates ``TBL_PRIVS`` with a foreign key to ``TBLS``, and waits for that transaction's lock
for ever. Hive's answer is its schematool, which runs SQL scripts pyspark does not ship; the
same schema comes from DataNucleus's own SchemaTool over Hive's ``package.jdo``, both in
pyspark's jars. Creating it is idempotent (about 2 s when it exists): wherever a Spark can
be the first to use the metastore, it runs first: the Connect server before it starts, a
local or spark-submit session before its catalog opens (once per process and URL:
:func:`ensure_schema_once`), and the deployments' metastore-init when it creates the
database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .spark_conf import METASTORE_ENV, metastore_conf, spark_jars

SCHEMA_TOOL = "org.datanucleus.store.schema.SchemaTool"
#: what Hive's own configuration sets for its metastore client (HiveConf's defaults), so
#: that the tables are named and keyed as the client expects
_HIVE_DATANUCLEUS = {"datanucleus.identifierFactory": "datanucleus1",
                     "datanucleus.rdbms.useLegacyNativeValueStrategy": "true",
                     "datanucleus.schema.autoCreateAll": "true"}


class MetastoreSchemaError(RuntimeError):
    """The metastore's tables could not be created; one line."""


def ensure_schema(url: str | None = None, timeout: float = 300) -> bool:
    """Create the tables of the PostgreSQL metastore ``url`` (default CKPT_METASTORE_URL)
    that do not exist; False (nothing to do) for another or no metastore."""
    url = url or os.environ.get(METASTORE_ENV)
    if not url or not url.startswith("jdbc:postgresql:"):
        return False
    conf = metastore_conf(url)
    jdo = {k.removeprefix("spark.hadoop."): v for k, v in conf.items()
           if k.startswith("spark.hadoop.javax.jdo.")}
    jars = _spark_home() / "jars"
    metastore_jar = next(iter(sorted(jars.glob("hive-metastore-*.jar"))), None)
    driver = [str(j) for j in spark_jars() if j.name.startswith("postgresql-")]
    if metastore_jar is None or not driver:
        raise MetastoreSchemaError("the metastore's tables need pyspark's hive-metastore jar "
                                   "and PostgreSQL's JDBC driver (scripts/install_spark_s3.sh)")
    with tempfile.TemporaryDirectory(prefix="ckpt-metastore-") as tmp:
        work = Path(tmp)
        with zipfile.ZipFile(metastore_jar) as z:
            (work / "package.jdo").write_bytes(z.read("package.jdo"))
        props = work / "metastore.properties"  # the password: in a file only we read
        props.touch(mode=0o600)
        props.write_text("".join(f"{k}={v}\n" for k, v in {**jdo, **_HIVE_DATANUCLEUS}.items()))
        cmd = [_java(), "-cp", os.pathsep.join([f"{jars}/*", *driver]), SCHEMA_TOOL,
               "-create", "-api", "JDO", "-props", str(props), str(work / "package.jdo")]
        try:
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True,  # noqa: S603
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MetastoreSchemaError(f"the metastore's tables were not created within "
                                       f"{timeout:g} s") from None
    if r.returncode != 0 or "completed successfully" not in r.stdout:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines()
                 if "Exception" in ln or "ERROR" in ln] or ["SchemaTool failed"]
        raise MetastoreSchemaError(f"the metastore's tables could not be created: "
                                   f"{lines[0].strip()[:300]}")
    return True


_ENSURED: set[str] = set()


def ensure_schema_once(url: str | None = None) -> bool:
    """:func:`ensure_schema`, once per process and metastore URL: a session starting
    after the first in the same process finds the tables made."""
    url = url or os.environ.get(METASTORE_ENV)
    if not url or url in _ENSURED:
        return False
    made = ensure_schema(url)
    _ENSURED.add(url)
    return made


def _spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise MetastoreSchemaError("no java: set JAVA_HOME or put java on PATH")
    return java

#!/usr/bin/env bash
# Fetches Spark's jars from Maven Central and links them into .tools/jars, where every Spark
# the project starts finds them (spark_jobs.runtime.spark_session, the Connect server,
# spark-submit, the image): the S3A connector of the Hadoop line pyspark 4.1.3 ships (3.4)
# with the AWS SDK bundle and the analytics accelerator it is built against,
# Delta Lake's runtime for Spark 4.1 (delta-spark_4.1_2.13) with its storage layer, Iceberg's
# runtime for Spark 4.1, and the JDBC drivers of the catalogs' databases (PostgreSQL for
# Spark's metastore and an Iceberg SQL catalog; SQLite for an embedded Iceberg catalog).
# Maven is not needed: without mvn the jars come from Maven Central by curl. `make demo` runs
# it on every start (Spark reads and writes Delta in every demo), `make test` too.
set -euo pipefail
cd "$(dirname "$0")/.."
SPARK_LINE=4.1   # the Spark line every runtime below is built for (pyspark==4.1.* pinned)
# S3A of Hadoop 3.4.3 over the Hadoop 3.4.2 client pyspark 4.1.3 bundles (the same line):
# 3.4.2's S3A with its AWS SDK (2.29.52) sends a SHA-256 that S3 servers other than AWS
# (MinIO) reject as not matching the body (XAmzContentChecksumMismatch), so every write with
# fs.s3a.create.checksum.algorithm=SHA256 failed; 3.4.3 moved to SDK 2.35.4 and keeps the
# SDK's new checksum behaviour off (HADOOP-19654).
HADOOP=3.4.3     # hadoop-aws
AWSSDK=2.35.4    # hadoop-project 3.4.3's aws-java-sdk-v2.version
AAL=1.3.1        # its amazon-s3-analyticsaccelerator-s3.version (a compile dependency)
DELTA=4.4.0      # delta-spark for Spark 4.1 (io.delta:delta-spark_4.1_2.13)
ICEBERG=1.12.0   # iceberg-spark-runtime for Spark 4.1 (none is published for 4.2)
PGJDBC=42.7.14   # PostgreSQL's JDBC driver: a metastore of Spark's catalog, an Iceberg catalog
SQLITE=3.54.1.0  # SQLite's JDBC driver: an embedded Iceberg SQL catalog shared with pyiceberg
M2=${MAVEN_REPO:-$HOME/.m2/repository}
want=(".tools/jars/hadoop-aws-$HADOOP.jar" ".tools/jars/bundle-$AWSSDK.jar"
      ".tools/jars/analyticsaccelerator-s3-$AAL.jar"
      ".tools/jars/delta-spark_${SPARK_LINE}_2.13-$DELTA.jar" ".tools/jars/delta-storage-$DELTA.jar"
      ".tools/jars/iceberg-spark-runtime-${SPARK_LINE}_2.13-$ICEBERG.jar"
      ".tools/jars/postgresql-$PGJDBC.jar" ".tools/jars/sqlite-jdbc-$SQLITE.jar")
missing=0
for w in "${want[@]}"; do [ -e "$w" ] || missing=1; done
if [ "$missing" = 0 ]; then exit 0; fi
mkdir -p .tools/jars
# Links left by another pin (another Spark line's runtimes, another Hadoop's connector) would
# put two versions of the same classes on every class path: only the wanted ones stay.
for j in .tools/jars/*.jar; do
  [ -e "$j" ] || [ -L "$j" ] || continue
  keep=0
  for w in "${want[@]}"; do [ "$j" = "$w" ] && keep=1; done
  [ "$keep" = 1 ] || rm -f "$j"
done
# fetch GROUP ARTIFACT VERSION: into Maven's local repository with mvn when it is installed
# (shared with every other build on the machine), else straight from Maven Central with
# curl, checked against the SHA-1 Central publishes beside it; linked into .tools/jars.
fetch() {
  local g=$1 a=$2 v=$3 dir
  dir="$M2/${g//.//}/$a/$v"
  if [ ! -s "$dir/$a-$v.jar" ]; then
    if command -v mvn >/dev/null 2>&1; then
      mvn -q dependency:get -Dartifact="$g:$a:$v" -Dtransitive=false
    else
      local url="${MAVEN_CENTRAL:-https://repo1.maven.org/maven2}/${g//.//}/$a/$v/$a-$v.jar"
      mkdir -p "$dir"
      if ! curl -fsSL --retry 3 -o "$dir/$a-$v.jar.part" "$url"; then
        echo "error: cannot download $a $v from Maven Central ($url)" >&2
        exit 1
      fi
      local sum got
      sum=$(curl -fsSL --retry 3 "$url.sha1" | cut -c1-40)
      got=$(sha1sum "$dir/$a-$v.jar.part" | cut -c1-40)
      if [ "$sum" != "$got" ]; then
        echo "error: $a $v from Maven Central does not match its published SHA-1" >&2
        rm -f "$dir/$a-$v.jar.part"
        exit 1
      fi
      mv "$dir/$a-$v.jar.part" "$dir/$a-$v.jar"
    fi
  fi
  ln -sf "$dir/$a-$v.jar" ".tools/jars/$a-$v.jar"
}
fetch org.apache.hadoop hadoop-aws "$HADOOP"
fetch software.amazon.awssdk bundle "$AWSSDK"
fetch software.amazon.s3.analyticsaccelerator analyticsaccelerator-s3 "$AAL"
fetch io.delta "delta-spark_${SPARK_LINE}_2.13" "$DELTA"
fetch io.delta delta-storage "$DELTA"
fetch org.apache.iceberg "iceberg-spark-runtime-${SPARK_LINE}_2.13" "$ICEBERG"
fetch org.postgresql postgresql "$PGJDBC"
fetch org.xerial sqlite-jdbc "$SQLITE"

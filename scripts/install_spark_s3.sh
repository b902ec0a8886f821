#!/usr/bin/env bash
# Fetches Spark's jars from Maven Central and links them into .tools/jars, where every Spark
# the project starts finds them (spark_jobs.runtime.spark_session, the Connect server,
# spark-submit, the image): the S3A connector matching the Hadoop client that pyspark 4.2.0
# ships (3.5.0, as 4.3.0) with the AWS SDK bundle it is built against, and Delta Lake's Spark
# runtime for Spark 4.2 (delta-spark_4.2_2.13 4.4.0, the build of delta-spark 4.4 for
# pyspark 4.2.0) with its storage layer. Iceberg publishes no Spark runtime for Spark 4.2
# yet (the newest, iceberg-spark-runtime-4.1_2.13 1.12.0, does not load on 4.2).
# Maven is not needed: without mvn the jars come from Maven Central by curl. `make demo` runs
# it on every start (Spark reads and writes Delta in every demo), `make test` too.
set -euo pipefail
cd "$(dirname "$0")/.."
HADOOP=3.5.0
AWSSDK=2.35.4   # hadoop-project 3.5.0's aws-java-sdk-v2.version
AAL=1.3.1       # its amazon-s3-analyticsaccelerator-s3.version (a compile dependency)
DELTA=4.4.0     # delta-spark for Spark 4.2 (io.delta:delta-spark_4.2_2.13)
PGJDBC=42.7.14  # PostgreSQL's JDBC driver: a metastore of Spark's catalog there
M2=${MAVEN_REPO:-$HOME/.m2/repository}
want=(".tools/jars/hadoop-aws-$HADOOP.jar" ".tools/jars/bundle-$AWSSDK.jar"
      ".tools/jars/analyticsaccelerator-s3-$AAL.jar" ".tools/jars/delta-spark_4.2_2.13-$DELTA.jar"
      ".tools/jars/delta-storage-$DELTA.jar" ".tools/jars/postgresql-$PGJDBC.jar")
missing=0
for w in "${want[@]}"; do [ -e "$w" ] || missing=1; done
if [ "$missing" = 0 ]; then exit 0; fi
mkdir -p .tools/jars
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
fetch io.delta delta-spark_4.2_2.13 "$DELTA"
fetch io.delta delta-storage "$DELTA"
fetch org.postgresql postgresql "$PGJDBC"

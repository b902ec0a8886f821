#!/usr/bin/env bash
# Fetches Spark's jars from Maven Central and links them into .tools/jars, where every Spark
# the project starts finds them (spark_jobs.runtime.spark_session, the Connect server,
# spark-submit, the image): the S3A connector matching the Hadoop client that pyspark 4.2.0
# ships (3.5.0, as 4.3.0) with the AWS SDK bundle it is built against, and Delta Lake's Spark
# runtime for Spark 4.2 (delta-spark_4.2_2.13 4.4.0, the build of delta-spark 4.4 for
# pyspark 4.2.0) with its storage layer. Iceberg publishes no Spark runtime for Spark 4.2
# yet (the newest, iceberg-spark-runtime-4.1_2.13 1.12.0, does not load on 4.2).
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
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) is needed to fetch hadoop-aws $HADOOP for s3a:// (apt-get install maven)" >&2
  exit 1
fi
mkdir -p .tools/jars
for art in "org.apache.hadoop:hadoop-aws:$HADOOP" "software.amazon.awssdk:bundle:$AWSSDK" \
           "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:$AAL" \
           "io.delta:delta-spark_4.2_2.13:$DELTA" "io.delta:delta-storage:$DELTA" \
           "org.postgresql:postgresql:$PGJDBC"; do
  mvn -q dependency:get -Dartifact="$art" -Dtransitive=false
done
ln -sf "$M2/org/apache/hadoop/hadoop-aws/$HADOOP/hadoop-aws-$HADOOP.jar" "${want[0]}"
ln -sf "$M2/software/amazon/awssdk/bundle/$AWSSDK/bundle-$AWSSDK.jar" "${want[1]}"
ln -sf "$M2/software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/$AAL/analyticsaccelerator-s3-$AAL.jar" \
  "${want[2]}"
ln -sf "$M2/io/delta/delta-spark_4.2_2.13/$DELTA/delta-spark_4.2_2.13-$DELTA.jar" "${want[3]}"
ln -sf "$M2/io/delta/delta-storage/$DELTA/delta-storage-$DELTA.jar" "${want[4]}"
ln -sf "$M2/org/postgresql/postgresql/$PGJDBC/postgresql-$PGJDBC.jar" "${want[5]}"

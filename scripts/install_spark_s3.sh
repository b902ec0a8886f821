#!/usr/bin/env bash
# Fetches the S3A connector matching the Hadoop client that pyspark 4.2.0 ships (3.5.0, as 4.3.0) and
# the AWS SDK bundle it is built against, from Maven Central, and links them into
# .tools/jars (spark_jobs.runtime.spark_session puts them on the classpath).
set -euo pipefail
cd "$(dirname "$0")/.."
HADOOP=3.5.0
AWSSDK=2.35.4   # hadoop-project 3.5.0's aws-java-sdk-v2.version
AAL=1.3.1       # its amazon-s3-analyticsaccelerator-s3.version (a compile dependency)
M2=${MAVEN_REPO:-$HOME/.m2/repository}
want=(".tools/jars/hadoop-aws-$HADOOP.jar" ".tools/jars/bundle-$AWSSDK.jar"
      ".tools/jars/analyticsaccelerator-s3-$AAL.jar")
if [ -e "${want[0]}" ] && [ -e "${want[1]}" ] && [ -e "${want[2]}" ]; then exit 0; fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) is needed to fetch hadoop-aws $HADOOP for s3a:// (apt-get install maven)" >&2
  exit 1
fi
mkdir -p .tools/jars
for art in "org.apache.hadoop:hadoop-aws:$HADOOP" "software.amazon.awssdk:bundle:$AWSSDK" \
           "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:$AAL"; do
  mvn -q dependency:get -Dartifact="$art" -Dtransitive=false
done
ln -sf "$M2/org/apache/hadoop/hadoop-aws/$HADOOP/hadoop-aws-$HADOOP.jar" "${want[0]}"
ln -sf "$M2/software/amazon/awssdk/bundle/$AWSSDK/bundle-$AWSSDK.jar" "${want[1]}"
ln -sf "$M2/software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/$AAL/analyticsaccelerator-s3-$AAL.jar" \
  "${want[2]}"

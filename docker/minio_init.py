"""Creates the buckets the deployment uses on MinIO (idempotent): the checkpoint storage's
and the data's, named by CKPT_STORAGE and CKPT_DATA, with the credentials and endpoint of
the AWS_* variables every component reads."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlparse

import boto3
from botocore.exceptions import ClientError


def main() -> int:
    s3 = boto3.client("s3")  # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... from the environment
    for var in ("CKPT_STORAGE", "CKPT_DATA"):
        bucket = urlparse(os.environ[var]).netloc
        try:
            s3.create_bucket(Bucket=bucket)
            print(f"created bucket {bucket}")
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou",
                                                     "BucketAlreadyExists"):
                print(f"minio-init: cannot create bucket {bucket}: "
                      f"{exc.response['Error']['Code']}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

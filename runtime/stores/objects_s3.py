"""An S3-compatible object store (AWS S3, MinIO, Ceph, moto's server) through boto3, with
the service's own presigned URLs."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from generated.errors import ObjectNotFound
from runtime.stores.objects import StoredObject, check_key

MISSING = {"NoSuchKey", "404", "NotFound"}


class S3ObjectStore:
    """Objects under ``prefix/`` in one bucket; credentials from boto3's chain unless given."""

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region or "us-east-1",
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def _name(self, key: str) -> str:
        return self.prefix + check_key(key)

    def create_bucket(self) -> None:
        """Create the bucket if it does not exist (deployments usually create it themselves)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self.client.create_bucket(Bucket=self.bucket)

    def put(self, key: str, data: bytes, content_type: str) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=self._name(key), Body=data, ContentType=content_type
        )

    def get(self, key: str) -> StoredObject:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self._name(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING:
                raise ObjectNotFound(key=key) from None
            raise
        with reply["Body"] as body:
            return StoredObject(body.read(), reply.get("ContentType") or "")

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._name(key))

    def signed_url(self, key: str, ttl_seconds: int) -> str:
        url: str = self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._name(key)},
            ExpiresIn=ttl_seconds,
        )
        return url

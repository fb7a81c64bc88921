"""A table named in the AWS Glue Data Catalog: its current metadata file, through boto3
(which the Lambda runtime provides; its endpoint may be set as any SDK's is)."""

from __future__ import annotations

import os
from typing import Any

from s3slice.core.errors import AccessDeniedError, ObjectFormatError, ObjectNotFoundError


def metadata_location(name: str, client: Any = None) -> str:
    """The ``metadata_location`` of the Glue table ``database.table``."""
    database, _, table = name.partition(".")
    uri = f"glue://{name}"
    if client is None:
        import boto3

        # Lambda sets AWS_REGION (boto3 itself reads only AWS_DEFAULT_REGION).
        client = boto3.client("glue", region_name=os.environ.get("AWS_REGION")
                              or os.environ.get("AWS_DEFAULT_REGION"))
    try:
        found = client.get_table(DatabaseName=database, Name=table)["Table"]
    except Exception as e:
        code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
        if code == "EntityNotFoundException":
            raise ObjectNotFoundError("no such table in the Glue Data Catalog", uri=uri) from None
        if code in ("AccessDeniedException", "AccessDenied"):
            raise AccessDeniedError(f"access denied: {e}", uri=uri) from None
        raise
    parameters = found.get("Parameters") or {}
    location = parameters.get("metadata_location")
    if str(parameters.get("table_type", "")).upper() != "ICEBERG" or not location:
        raise ObjectFormatError("not an Iceberg table (no table_type ICEBERG with a "
                                "metadata_location)", uri=uri)
    return str(location)

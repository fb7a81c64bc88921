"""What the constructs' props may hold: the runtimes, architectures and output formats,
the characters a prefix may carry, and the error a prop out of range raises.

This module imports nothing from the rest of ``s3slice_cdk`` but ``contract``.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from .contract import FUNCTION_CODE_DIR as FUNCTION_CODE_DIR
from .contract import OUTPUT_FORMATS as OUTPUT_FORMATS
from .contract import QUERY_FIELDS as QUERY_FIELDS

Architecture = Literal["arm64", "x86_64"]
#: The output formats as a type for the constructs' props. Its values are the function's
#: (``OUTPUT_FORMATS``, from the function's ``core/contract.py``): checked here, at import.
OutputFormat = Literal["parquet", "csv", "json"]
if set(get_args(OutputFormat)) != set(OUTPUT_FORMATS):
    raise ImportError(f"settings.OutputFormat {get_args(OutputFormat)} no longer matches the "
                      f"function's output formats {OUTPUT_FORMATS}; update the type")

ARCHITECTURES: tuple[Architecture, ...] = ("arm64", "x86_64")
PYTHON_VERSIONS: tuple[str, ...] = ("3.11", "3.12", "3.13", "3.14")

#: What a prefix, suffix or URI may contain. Not ``*`` or ``?`` (IAM wildcards in the
#: ARNs and ``s3:prefix`` conditions granted), not ``$`` (``${...}`` is an IAM policy
#: variable), and nothing S3 wants URL-encoded in requests or notifications.
KEY_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/!-_.'()=")
#: The Python runtimes Lambda SnapStart supports (3.12 and later; checked against CDK's
#: ``Runtime.supports_snap_start`` in ``function.py``).
SNAPSTART_PYTHON_VERSIONS: tuple[str, ...] = tuple(
    v for v in PYTHON_VERSIONS if tuple(map(int, v.split("."))) >= (3, 12))
#: The most ephemeral storage (/tmp, MB) a SnapStart function may have.
SNAPSTART_MAX_EPHEMERAL_STORAGE_MB = 512


class SettingsError(ValueError):
    """A prop or context value is missing, malformed or contradicts another one."""


#: A Glue database's or table's name, as an IAM ARN may name it exactly (Glue keeps names
#: in lowercase; no ``*``, ``?`` or ``.``).
_GLUE_NAME = re.compile(r"[a-z0-9_-]{1,255}")


def is_glue_table(name: str) -> bool:
    """``name`` is ``database.table``, each part a Glue name (``_GLUE_NAME``)."""
    database, dot, table = name.partition(".")
    return bool(dot and _GLUE_NAME.fullmatch(database) and _GLUE_NAME.fullmatch(table))

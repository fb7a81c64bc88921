"""The repository's own CDK app (``cdk/app.py``, ``cdk.json``): one stack,
:class:`S3SliceStack`, composed of the construct library's constructs (``s3slice_cdk``)
from CDK context settings (:class:`StackSettings`). It is not part of the ``s3slice-cdk``
distribution: an app of your own imports ``s3slice_cdk`` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdk_nag

from s3slice_cdk.contract import REPO_DIR

from .settings import StackSettings
from .stack import S3SliceStack

__all__ = ["CDK_JSON", "NAG_OFF_WARNING", "STACK_NAME", "S3SliceStack", "StackSettings",
           "build_app", "cdk_json_context"]

#: The CDK CLI's project file of the repository's app; its ``context`` holds the feature
#: flags the app runs with.
CDK_JSON = REPO_DIR / "cdk.json"
STACK_NAME = "S3Slice"
#: What synth prints (a CDK warning on the stack) when the ``nag`` setting is false.
NAG_OFF_WARNING = ("nag=false: cdk-nag's AwsSolutions checks are OFF for this synth, so "
                   "no finding (a wildcard grant, an unencrypted resource) can stop it")


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` of ``cdk.json`` (feature flags), for building the app outside the CLI."""
    context = json.loads(path.read_text())["context"]
    assert isinstance(context, dict)
    return context


def build_app(context: Mapping[str, Any] | None = None, *,
              outdir: str | None = None) -> tuple[cdk.App, S3SliceStack]:
    """The app and its one stack. Environment-agnostic: synth makes no AWS call.

    ``context`` is added to what the CLI passes (``cdk.json`` and ``--context``), and
    ``cdk.json``'s own context (its feature flags) is the base, so that running
    ``python3 cdk/app.py`` without the CLI synthesizes the same stack. Values the CLI
    passes win over both. cdk-nag's AwsSolutions checks run unless the ``nag`` setting is
    false, and then synth says so with a warning. A missing layer fails here
    (``LayerNotBuiltError``, raised by the function construct).
    """
    app = cdk.App(context={**cdk_json_context(), **(context or {})}, outdir=outdir)
    settings = StackSettings.from_context(app.node.try_get_context)
    stack = S3SliceStack(
        app, STACK_NAME, settings=settings,
        description="s3slice: a Lambda read service for Parquet, CSV and JSON in S3",
    )
    if settings.nag:
        cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app, verbose=True))
    else:
        cdk.Annotations.of(stack).add_warning_v2("s3slice:nag-off", NAG_OFF_WARNING)
    return app, stack

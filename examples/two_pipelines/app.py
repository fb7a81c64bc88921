#!/usr/bin/env python3
"""An app of your own with two s3slice pipelines sharing one function.

    pip install ./s3slice_cdk-0.1.0-py3-none-any.whl   # a release's construct library
    cdk synth --context layer=./s3slice-layer-0.1.0-python3.13-arm64.zip

Both files are a release's assets (no package index has them yet); the wheel brings the
constructs and the function's code, without polars or pyarrow. ``layer`` is the release's
layer zip for the function's architecture and Python (or, in a clone, a layer directory
built with ``python layers/build.py --arch arm64``). The buckets are yours and already
exist; S3 sends their events to EventBridge once deployed (the pipelines switch it on).
The stack's id and every name in it are this app's, not s3slice's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk
import cdk_nag
from aws_cdk import aws_s3 as s3

from s3slice_cdk import (
    FunctionSettings,
    LayerNotBuiltError,
    Pipeline,
    PipelineProps,
    PipelineWorkflowProps,
    ReadFunction,
    ReadFunctionProps,
    SettingsError,
)


class AnalyticsSlices(cdk.Stack):
    """Orders and clicks landing in one bucket, each sliced by its own query."""

    def __init__(self, scope: cdk.App, construct_id: str, *, layer: Path,
                 landing: str, results: str, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        landing_bucket = s3.Bucket.from_bucket_name(self, "Landing", landing)
        results_bucket = s3.Bucket.from_bucket_name(self, "Results", results)
        slicer = ReadFunction(self, "Slicer", props=ReadFunctionProps(
            layer_dir=layer, architecture="arm64", python_version="3.13",
            memory_size=2048, ephemeral_storage_size=2048,
            settings=FunctionSettings(concurrency=32)))
        orders = Pipeline(self, "Orders", props=PipelineProps(
            function=slicer,
            source_bucket=landing_bucket, source_prefix="orders/",
            source_suffixes=(".parquet",),
            query={"columns": ["order_id", "amount", "country"],
                   "filter": "amount >= 100"},
            output_bucket=results_bucket, output_prefix="orders-large/"))
        # Every order already under orders/, once: a Distributed Map and a reduce step.
        orders.add_workflow(PipelineWorkflowProps(items_per_batch=20))
        Pipeline(self, "Clicks", props=PipelineProps(
            function=slicer,
            source_bucket=landing_bucket, source_prefix="clicks/",
            query={"sql": "SELECT page, COUNT(*) AS views FROM s3object GROUP BY page"},
            output_bucket=results_bucket, output_prefix="clicks-by-page/",
            output_format="csv"))


def main() -> int:
    app = cdk.App()
    layer = app.node.try_get_context("layer")
    if not layer:
        print("give the layer: cdk synth --context layer=PATH (a release's layer zip or a "
              "built layer directory)", file=sys.stderr)
        return 1
    try:
        AnalyticsSlices(app, app.node.try_get_context("stackName") or "AnalyticsSlices",
                        layer=Path(layer),
                        landing=app.node.try_get_context("landingBucket") or "acme-landing",
                        results=app.node.try_get_context("resultsBucket") or "acme-results")
    except (SettingsError, LayerNotBuiltError) as e:
        print(f"example: {e}", file=sys.stderr)
        return 1
    cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app, verbose=True))
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())

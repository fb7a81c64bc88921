"""s3slice's CDK construct library, and the repository's own app built from it.

Import these in your own CDK app (``pip install 's3slice[cdk]'``); every construct takes
one ``props`` object whose fields are keyword-only and typed:

- :class:`ReadFunction` (:class:`ReadFunctionProps`, :class:`FunctionSettings`): the
  function, its code asset and dependency layer (a built directory or a release's zip,
  :func:`layer_zip_name`), architecture, memory, /tmp, SnapStart and engine settings.
- :class:`Pipeline` (:class:`PipelineProps`): source bucket + prefix (an EventBridge rule
  per pipeline, whose input carries the pipeline's query and output) → the function →
  output bucket + prefix, with its queue, dead-letter queue and alarm. Several pipelines
  share one function or have their own; :class:`PipelineGuard` refuses any pipeline of a
  stack whose output another could be triggered by, read, or share
  (:class:`PipelineConflictError`).
- :meth:`Pipeline.add_workflow` (:class:`PipelineWorkflowProps`): the pipeline's prefix
  workflow, a :class:`Workflow` (a Distributed Map and a reduce step) over its source
  prefix with its query and output as defaults, granted and alarmed.
- :class:`Alarms`, :class:`AlarmTopic`, :class:`Triggers`: the repository app's alarms,
  topic and S3-notification triggers.

:class:`S3SliceStack` with :class:`StackSettings` is the repository's own deployment
(``cdk/app.py``), its CDK context keys mapped onto these props in ``settings``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used (below): ``s3slice_cdk.staging`` needs no CDK
    import aws_cdk as cdk

    from .alarms import Alarms, AlarmsProps, AlarmTopic
    from .function import LayerNotBuiltError, ReadFunction, ReadFunctionProps, layer_zip_name
    from .guard import PipelineConflictError, PipelineGuard
    from .pipeline import Pipeline, PipelineProps, object_created_pattern
    from .pipeline_workflow import PipelineWorkflowProps
    from .settings import SettingsError, StackSettings
    from .stack import S3SliceStack
    from .triggers import Triggers, TriggersProps
    from .tuning import FunctionSettings
    from .workflow import Workflow, WorkflowProps

#: Each public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Alarms", "AlarmsProps", "AlarmTopic"), "alarms"),
    **dict.fromkeys(("LayerNotBuiltError", "ReadFunction", "ReadFunctionProps",
                     "layer_zip_name"), "function"),
    **dict.fromkeys(("PipelineConflictError", "PipelineGuard"), "guard"),
    **dict.fromkeys(("Pipeline", "PipelineProps", "object_created_pattern"), "pipeline"),
    "PipelineWorkflowProps": "pipeline_workflow",
    **dict.fromkeys(("SettingsError", "StackSettings"), "settings"),
    "S3SliceStack": "stack",
    **dict.fromkeys(("Triggers", "TriggersProps"), "triggers"),
    "FunctionSettings": "tuning",
    **dict.fromkeys(("Workflow", "WorkflowProps"), "workflow"),
}

__all__ = ["CDK_JSON", "AlarmTopic", "Alarms", "AlarmsProps", "FunctionSettings",
           "LayerNotBuiltError", "Pipeline", "PipelineConflictError", "PipelineGuard",
           "PipelineProps", "PipelineWorkflowProps", "ReadFunction", "ReadFunctionProps",
           "S3SliceStack", "SettingsError", "StackSettings", "Triggers", "TriggersProps",
           "Workflow", "WorkflowProps", "build_app", "cdk_json_context", "layer_zip_name",
           "object_created_pattern"]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first used."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


#: The CDK CLI's project file of the repository's app; its ``context`` holds the feature
#: flags the app runs with.
CDK_JSON = Path(__file__).resolve().parents[2] / "cdk.json"
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
    import aws_cdk as cdk
    import cdk_nag

    from .settings import StackSettings
    from .stack import S3SliceStack

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

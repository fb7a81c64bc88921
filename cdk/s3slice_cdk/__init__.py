"""s3slice's CDK construct library (the ``s3slice-cdk`` distribution).

Import these in your own CDK app (``pip install`` a release's ``s3slice_cdk`` wheel);
every construct takes one ``props`` object whose fields are keyword-only and typed:

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

The names are imported when first used, so that ``s3slice_cdk.staging`` (standard library
only, which the repository's layer build shares) imports no CDK. The repository's own
deployment (``cdk/app.py``: ``S3SliceStack``, ``StackSettings``, ``build_app``) is the
package ``s3slice_app`` beside this one, which no wheel ships.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used (below): ``s3slice_cdk.staging`` needs no CDK
    from .alarms import Alarms, AlarmsProps, AlarmTopic
    from .function import LayerNotBuiltError, ReadFunction, ReadFunctionProps, layer_zip_name
    from .guard import PipelineConflictError, PipelineGuard
    from .pipeline import Pipeline, PipelineProps, object_created_pattern
    from .pipeline_workflow import PipelineWorkflowProps
    from .settings import SettingsError
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
    "SettingsError": "settings",
    **dict.fromkeys(("Triggers", "TriggersProps"), "triggers"),
    "FunctionSettings": "tuning",
    **dict.fromkeys(("Workflow", "WorkflowProps"), "workflow"),
}

__all__ = ["AlarmTopic", "Alarms", "AlarmsProps", "FunctionSettings",
           "LayerNotBuiltError", "Pipeline", "PipelineConflictError", "PipelineGuard",
           "PipelineProps", "PipelineWorkflowProps", "ReadFunction", "ReadFunctionProps",
           "SettingsError", "Triggers", "TriggersProps", "Workflow", "WorkflowProps",
           "layer_zip_name", "object_created_pattern"]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first used."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

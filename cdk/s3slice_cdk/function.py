"""The read function and its dependency layer."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Annotations, Duration, RemovalPolicy, Size
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from .code_asset import function_code
from .contract import FUNCTION_CODE_DIR, IN_REPOSITORY, SAFETY_MARGIN_MS
from .settings import (
    ARCHITECTURES,
    PYTHON_VERSIONS,
    SNAPSTART_MAX_EPHEMERAL_STORAGE_MB,
    SNAPSTART_PYTHON_VERSIONS,
    Architecture,
    OutputFormat,
    SettingsError,
)
from .tuning import FunctionSettings

#: The handler inside the code asset (``functions/s3slice/handler.py``).
HANDLER = "s3slice.handler.lambda_handler"

_RUNTIMES: dict[str, lambda_.Runtime] = {
    "3.11": lambda_.Runtime.PYTHON_3_11,
    "3.12": lambda_.Runtime.PYTHON_3_12,
    "3.13": lambda_.Runtime.PYTHON_3_13,
    "3.14": lambda_.Runtime.PYTHON_3_14,
}
_ARCHITECTURES: dict[str, lambda_.Architecture] = {
    "arm64": lambda_.Architecture.ARM_64,
    "x86_64": lambda_.Architecture.X86_64,
}
assert set(_RUNTIMES) == set(PYTHON_VERSIONS)
assert set(_ARCHITECTURES) == set(ARCHITECTURES)
assert {v for v, r in _RUNTIMES.items() if r.supports_snap_start} == set(
    SNAPSTART_PYTHON_VERSIONS), "settings.SNAPSTART_PYTHON_VERSIONS disagrees with CDK"

#: The alias every trigger invokes when SnapStart is on (SnapStart applies only to
#: published versions, never to $LATEST).
LIVE_ALIAS = "live"
#: The warning CDK adds to every SnapStart function ("SnapStart only supports published
#: Lambda versions"), acknowledged because the construct publishes one and aliases it.
SNAPSTART_PUBLISH_WARNING = "@aws-cdk/aws-lambda:snapStartRequirePublish"


class LayerNotBuiltError(FileNotFoundError):
    """The layer directory is missing: it has to be built before synth."""


def layer_zip_name(version: str, *, architecture: Architecture, python_version: str) -> str:
    """The name of a release's layer zip: ``s3slice-layer-0.1.0-python3.13-arm64.zip``."""
    return f"s3slice-layer-{version}-python{python_version}-{architecture}.zip"


def check_layer_dir(layer_dir: Path, *, architecture: Architecture, python_version: str) -> None:
    """Fail with instructions when ``layer_dir`` is not a built layer (``python/`` inside)
    or a layer zip; a release zip (:func:`layer_zip_name`) must name this architecture
    and Python."""
    release = layer_zip_name("<version>", architecture=architecture,
                             python_version=python_version)
    if IN_REPOSITORY:  # the repository's own app: its layer build and context
        how = (f"Build it first with `python layers/build.py --arch {architecture} "
               f"--python {python_version}`, or point the app at a built layer with "
               "`--context layerDir=PATH` (a directory that contains python/), or give a "
               f"release's layer zip ({release}).")
    else:
        how = (f"Give layer_dir a release's layer zip ({release}), or a directory that "
               "contains python/ with the layer's packages.")
    if layer_dir.suffix == ".zip":
        if not layer_dir.is_file():
            raise LayerNotBuiltError(f"the Lambda layer zip {layer_dir} does not exist. {how}")
        name = layer_dir.name
        if name.startswith("s3slice-layer-") and not name.endswith(
                f"-python{python_version}-{architecture}.zip"):
            raise LayerNotBuiltError(f"the layer zip {name} is not built for python"
                                     f"{python_version} on {architecture}. {how}")
        return
    if not layer_dir.is_dir():
        raise LayerNotBuiltError(f"the Lambda layer directory {layer_dir} does not exist. {how}")
    if not (layer_dir / "python").is_dir():
        raise LayerNotBuiltError(f"the Lambda layer directory {layer_dir} has no python/ "
                                 f"subdirectory, so it is not a built layer. {how}")


def function_environment(*, query: Mapping[str, Any] | None, output_uri: str | None,
                         output_format: OutputFormat,
                         source_uris: Sequence[str]) -> dict[str, str]:
    """The environment variables that are the contract with the function code: a default
    query and output only when given (a :class:`~s3slice_cdk.pipeline.Pipeline`'s
    messages carry their own)."""
    defaults: dict[str, str] = {}
    if query is not None:
        defaults["S3SLICE_QUERY"] = json.dumps(dict(query), sort_keys=True,
                                               separators=(",", ":"))
    if output_uri is not None:
        defaults["S3SLICE_OUTPUT_URI"] = output_uri
        defaults["S3SLICE_OUTPUT_FORMAT"] = output_format
    if source_uris:
        defaults["S3SLICE_SOURCE_URIS"] = ",".join(source_uris)
    return {
        **defaults,
        "POWERTOOLS_SERVICE_NAME": "s3slice",
        "POWERTOOLS_METRICS_NAMESPACE": "S3Slice",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadFunctionProps:
    """What the function construct needs, every prop keyword-only. Paths must exist at
    synth time."""

    #: The dependency layer: a built layer directory (``python/`` inside, as
    #: ``python layers/build.py --arch <architecture>`` makes it) or a release's layer zip
    #: (:func:`layer_zip_name`), for this ``architecture`` and ``python_version``.
    layer_dir: Path
    #: The directory the code asset is staged from (holds the ``s3slice`` package):
    #: ``functions/`` in a clone, else the copy the s3slice-cdk distribution carries.
    code_dir: Path = FUNCTION_CODE_DIR
    #: ``S3SLICE_QUERY``: a default query for events that carry none (a pipeline's carry
    #: their own); none: no default.
    query: Mapping[str, Any] | None = None
    #: ``S3SLICE_OUTPUT_URI``: a default output ``s3://bucket/prefix/`` (may hold CDK
    #: tokens) for events that name none; none: no default.
    output_uri: str | None = None
    #: ``S3SLICE_OUTPUT_FORMAT``: the default output's format.
    output_format: OutputFormat = "parquet"
    #: ``S3SLICE_SOURCE_URIS``: what the default configuration's triggers watch (the
    #: function refuses a default output inside them).
    source_uris: Sequence[str] = ()
    #: ``arm64`` or ``x86_64`` (the layer's).
    architecture: Architecture = "arm64"
    #: The Lambda Python runtime, ``3.11`` to ``3.14`` (the layer's).
    python_version: str = "3.13"
    #: MB, 128..10240.
    memory_size: int = 3008
    #: MB of /tmp, 512..10240 (at most 512 with SnapStart).
    ephemeral_storage_size: int = 4096
    #: 1..900.
    timeout_seconds: int = 300
    #: Reserved concurrent executions; none: unreserved.
    reserved_concurrency: int | None = None
    #: The function's log retention (the shortest CloudWatch choice keeping that long).
    log_retention_days: int = 30
    #: Lambda SnapStart on published versions, with a version and the alias ``live``.
    snap_start: bool = False
    #: The engine's settings (``S3SLICE_*`` variables); none: the function's defaults.
    settings: FunctionSettings | None = None


class ReadFunction(Construct):
    """The s3slice function with its layer, its own role and its own log group.

    The role starts with nothing but writing to the function's log group (and X-Ray,
    which active tracing adds); whoever composes this construct grants S3 access.

    With ``snap_start``, Lambda snapshots the initialized function whenever a version is
    published: the construct publishes ``function.current_version`` (a new version for
    every change of code, layer or configuration; the replaced one is deleted, with its
    cached snapshot) and points the alias ``live`` at it. ``invoked`` is what every trigger
    must invoke: the alias with SnapStart, else the function itself ($LATEST).

    The code asset is ``code_dir`` staged with bytecode for the runtime's Python
    (``code_asset``), so that no cold start compiles the function's modules; without a
    CPython of that version here it ships the sources only, with a warning.

    Attributes: ``function``, ``code`` (the staged asset), ``layer``, ``role``,
    ``log_group``, ``runtime``,
    ``architecture``, ``timeout``, ``version`` and ``alias`` (``None`` without SnapStart),
    ``invoked``.
    """

    def __init__(self, scope: Construct, construct_id: str, *,
                 props: ReadFunctionProps) -> None:
        super().__init__(scope, construct_id)
        check_props(props, self.node.path)
        check_layer_dir(props.layer_dir, architecture=props.architecture,
                        python_version=props.python_version)
        #: The runtime's Python version, ``3.13``.
        self.python_version = props.python_version
        #: Set by the first :class:`~s3slice_cdk.pipeline.Pipeline` that uses the function.
        self.pipeline_acknowledgments: object | None = None
        self.runtime = _RUNTIMES[props.python_version]
        self.architecture = _ARCHITECTURES[props.architecture]
        self.timeout = Duration.seconds(props.timeout_seconds)

        self.layer = lambda_.LayerVersion(
            self, "Dependencies",
            # A directory or a zip; absolute, as jsii resolves relative paths from its own cwd.
            code=lambda_.Code.from_asset(str(props.layer_dir.resolve())),
            compatible_runtimes=[self.runtime],
            compatible_architectures=[self.architecture],
            description=(f"s3slice dependencies (polars, pyarrow, obstore, powertools) for "
                         f"{props.architecture}/python{props.python_version}"),
        )
        self.log_group = logs.LogGroup(
            self, "Logs",
            retention=retention(props.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self, "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="s3slice read function: logs, traces, and the S3 locations granted",
        )
        self.log_group.grant_write(self.role)

        code, self.code = function_code(self, props.code_dir, props.python_version)
        self.function = lambda_.Function(
            self, "Function",
            description="s3slice: the columns and rows a query needs from objects in S3",
            code=code,
            handler=HANDLER,
            runtime=self.runtime,
            architecture=self.architecture,
            layers=[self.layer],
            memory_size=props.memory_size,
            ephemeral_storage_size=Size.mebibytes(props.ephemeral_storage_size),
            timeout=self.timeout,
            reserved_concurrent_executions=props.reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            role=self.role,
            log_group=self.log_group,
            environment={**function_environment(
                query=props.query, output_uri=props.output_uri,
                output_format=props.output_format, source_uris=props.source_uris),
                **(props.settings.environment() if props.settings else {})},
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if props.snap_start else None,
            current_version_options=lambda_.VersionOptions(
                # An old version keeps its snapshot cached (and billed) while it exists.
                removal_policy=RemovalPolicy.DESTROY) if props.snap_start else None,
        )
        self.version: lambda_.Version | None = None
        self.alias: lambda_.Alias | None = None
        #: What the triggers, the workflow and direct callers invoke.
        self.invoked: lambda_.IFunction = self.function
        if props.snap_start:
            Annotations.of(self.function).acknowledge_warning(
                SNAPSTART_PUBLISH_WARNING,
                f"the construct publishes a version (current_version) and the alias "
                f"{LIVE_ALIAS!r} that every trigger invokes")
            self.version = self.function.current_version
            self.alias = lambda_.Alias(
                self, "Live", alias_name=LIVE_ALIAS, version=self.version,
                description="s3slice: the published, SnapStart-enabled version every "
                            "trigger invokes")
            self.invoked = self.alias


def check_props(props: ReadFunctionProps, path: str) -> None:
    """Refuse (:class:`SettingsError`, naming ``path`` and the prop) what CloudFormation or
    Lambda would refuse at deploy, or what would make every invocation fail."""
    def refuse(prop: str, why: str) -> SettingsError:
        return SettingsError(f"{path}: {prop}: {why}")

    for prop, value, low, high in (
            ("memory_size", props.memory_size, 128, 10240),
            ("ephemeral_storage_size", props.ephemeral_storage_size, 512, 10240),
            ("timeout_seconds", props.timeout_seconds, 1, 900),
            ("log_retention_days", props.log_retention_days, 1, 3653)):
        if type(value) is not int or not low <= value <= high:
            raise refuse(prop, f"must be a whole number from {low} to {high} (Lambda's "
                               f"range), got {value!r}")
    margin = SAFETY_MARGIN_MS / 1000
    if props.timeout_seconds <= margin:
        raise refuse("timeout_seconds", f"{props.timeout_seconds} s leaves no time to work: "
                     f"the function stops {margin:g} s before its timeout so that nothing is "
                     f"left half-written, so every invocation would fail; give more than "
                     f"{margin:g} (a read of one object usually needs 30 or more)")
    if props.reserved_concurrency is not None and props.reserved_concurrency < 0:
        raise refuse("reserved_concurrency", f"must be 0 or more, got "
                     f"{props.reserved_concurrency}")
    if props.architecture not in ARCHITECTURES:
        raise refuse("architecture", f"must be one of {', '.join(ARCHITECTURES)} (the "
                     f"layer's), got {props.architecture!r}")
    if props.python_version not in PYTHON_VERSIONS:
        raise refuse("python_version", f"the layer is built for Python "
                     f"{', '.join(PYTHON_VERSIONS)}, got {props.python_version!r}")
    if props.snap_start:
        if props.python_version not in SNAPSTART_PYTHON_VERSIONS:
            raise refuse("python_version", f"{props.python_version} cannot be used with "
                         "snap_start=True: Lambda SnapStart supports the Python runtimes "
                         f"{', '.join(SNAPSTART_PYTHON_VERSIONS)} only; set python_version "
                         "(and the layer's) to one of them, or snap_start=False")
        if props.ephemeral_storage_size > SNAPSTART_MAX_EPHEMERAL_STORAGE_MB:
            raise refuse("ephemeral_storage_size", f"{props.ephemeral_storage_size} MB of /tmp "
                         f"cannot be used with snap_start=True: Lambda SnapStart allows at "
                         f"most {SNAPSTART_MAX_EPHEMERAL_STORAGE_MB} MB; set "
                         f"ephemeral_storage_size={SNAPSTART_MAX_EPHEMERAL_STORAGE_MB}, or "
                         "snap_start=False")


#: CloudWatch Logs' retention choices in days (FOUR_YEARS is not in CDK's enum).
_RETENTIONS: tuple[tuple[int, logs.RetentionDays], ...] = (
    (1, logs.RetentionDays.ONE_DAY), (3, logs.RetentionDays.THREE_DAYS),
    (5, logs.RetentionDays.FIVE_DAYS), (7, logs.RetentionDays.ONE_WEEK),
    (14, logs.RetentionDays.TWO_WEEKS), (30, logs.RetentionDays.ONE_MONTH),
    (60, logs.RetentionDays.TWO_MONTHS), (90, logs.RetentionDays.THREE_MONTHS),
    (120, logs.RetentionDays.FOUR_MONTHS), (150, logs.RetentionDays.FIVE_MONTHS),
    (180, logs.RetentionDays.SIX_MONTHS), (365, logs.RetentionDays.ONE_YEAR),
    (400, logs.RetentionDays.THIRTEEN_MONTHS), (545, logs.RetentionDays.EIGHTEEN_MONTHS),
    (731, logs.RetentionDays.TWO_YEARS), (1096, logs.RetentionDays.THREE_YEARS),
    (1827, logs.RetentionDays.FIVE_YEARS), (2192, logs.RetentionDays.SIX_YEARS),
    (2557, logs.RetentionDays.SEVEN_YEARS), (2922, logs.RetentionDays.EIGHT_YEARS),
    (3288, logs.RetentionDays.NINE_YEARS), (3653, logs.RetentionDays.TEN_YEARS),
)


def retention(days: int) -> logs.RetentionDays:
    """The shortest retention CloudWatch Logs offers that keeps logs at least ``days``."""
    for allowed, member in _RETENTIONS:
        if allowed >= days:
            return member
    return logs.RetentionDays.TEN_YEARS

"""The Lambda edges: events parsed into typed requests, routed by one dispatch table,
configuration from the environment, telemetry (Powertools), S3 Select requests and the
workflow's Check and Reduce steps.

The only package that knows Lambda; it may import everything else, and nothing imports it
but ``s3slice.handler`` and the CLI.
"""

#!/usr/bin/env python3
"""The CDK app (``cdk.json`` runs it): ``cdk synth``, ``cdk deploy``. Makes no AWS call."""

from __future__ import annotations

import sys

from s3slice_app import build_app
from s3slice_cdk import LayerNotBuiltError, SettingsError


def main() -> int:
    try:
        app, _ = build_app()
    except (SettingsError, LayerNotBuiltError) as e:
        print(f"s3slice: {e}", file=sys.stderr)
        return 1
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())

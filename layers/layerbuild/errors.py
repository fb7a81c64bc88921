"""The one error the build raises."""

from __future__ import annotations


class BuildError(Exception):
    """The layer could not be built, or the built layer is not what it must be."""

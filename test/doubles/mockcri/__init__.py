"""A mock CRI container runtime (runtime.v1 RuntimeService) for the tests."""
from .runtime import MockRuntime  # noqa: F401

"""A real containerd for the tests (daemon.py), a local busybox image
(image.py) and a CRI client playing the pod runner (runner.py)."""
from .daemon import Containerd, missing  # noqa: F401
from .image import IMAGE, build as build_image  # noqa: F401
from .runner import PodRunner  # noqa: F401

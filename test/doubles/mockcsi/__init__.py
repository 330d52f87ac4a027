"""Mock CSI node plugin for kvolumed's integration tests.

Run as its own process (`python3 -m doubles.mockcsi --help`); drive it with
ControlClient (control.py), talk CSI to it with CSIClient (client.py), and
use the pytest fixtures in fixtures.py.  cleanup() removes whatever a killed
driver left behind.
"""
from .sweep import cleanup
from .control import ControlClient, ControlError
from .client import CSIClient, status_of

__all__ = ["cleanup", "ControlClient", "ControlError", "CSIClient", "status_of"]

"""`cli.long_lived`: what a start loads is made with the cyclic collector off, then frozen, and the
collector is on again afterwards, also when loading fails. Checked in a fresh interpreter: freezing
this test process's objects would keep them for the rest of the run."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from vgpu_bridge.cli import long_lived
frozen = gc.get_freeze_count()
with long_lived():
    assert not gc.isenabled()
    loaded = [[i] for i in range(1000)]
assert gc.isenabled() and gc.get_freeze_count() >= frozen + 1000
try:
    with long_lived():
        raise ImportError("a module that cannot load")
except ImportError:
    assert gc.isenabled()
print("ok")
"""


def test_a_start_is_loaded_without_the_collector_then_frozen() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr

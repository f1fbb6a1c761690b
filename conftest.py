"""Every pytest run of this repository (tests/ and e2e/).

The webhook processes the tests start stop at once on SIGTERM, as before issue 38: with the
binary's default drain (`--drain-seconds 10`) each fixture's teardown would wait out the drain
or be killed at its end, ten seconds apiece. The tests of the drain pass `--drain-seconds`
themselves (a flag wins over the environment); a release's own env (e2e/chart) sets its own.
"""

from __future__ import annotations

import os

os.environ.setdefault("VGPU_BRIDGE_DRAIN_SECONDS", "0")

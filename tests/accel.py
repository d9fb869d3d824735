"""Whether the accelerator (kubegpu.accel) runs on this ansible-core: only on the minors it was
tested on (its gate.TESTED_MINORS). Tests of its internals make sense there alone, and those
internals need not even import elsewhere; that it steps aside, with the same results, is
tested everywhere. scripts/leg-ansible-latest runs them on 2.21 and 2.20 (Python 3.13)."""

from __future__ import annotations

import pytest
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate

TESTED = gate.minor() in gate.TESTED_MINORS
only_where_it_runs = pytest.mark.skipif(
    not TESTED,
    reason=f"kubegpu.accel steps aside on ansible-core {gate.ANSIBLE_VERSION} "
    f"(tested on {', '.join(gate.TESTED_MINORS)})",
)

"""A vault behind three gates, each opened by one 1-in-6 random choice,
around it the official Antithesis Python SDK's assertion kinds. Run in a
container image built from Debian's python3 with the `antithesis` package
from PyPI (see guest-image/src/oci/debian.rs); hvsim explores it: every
random choice is a branch point, and "the vault stays closed" failing is
the bug to find.
"""

import time

from antithesis import assertions, lifecycle, random

x = 5
assertions.always(x >= 5, "always: x is at least 5", {"x": x})
assertions.always_or_unreachable(x < 7, "always or unreachable: x stays below 7")
assertions.sometimes(x == 5, "sometimes: x is 5")
assertions.reachable("reachable: the program starts")
if x > 1000:
    assertions.unreachable("unreachable: x is never huge", {"x": x})
assertions.always_greater_than(x, 1, "numeric: x stays above 1")
assertions.sometimes_less_than(x, 6, "numeric: x sometimes below 6")
assertions.always_some({"small": x < 10, "odd": x % 2 == 1}, "boolean: x is small or odd")
lifecycle.send_event("vault_started", {"gates": 3})
lifecycle.setup_complete({"program": "antithesis-python-vault"})

six = list(range(6))
while True:
    # Each attempt takes virtual time, so every slice makes a few.
    time.sleep(0.1)
    gate1 = random.get_random() % 6 == 0
    assertions.sometimes(gate1, "gate 1 opens")
    if not gate1:
        continue
    gate2 = random.random_choice(six) == 0
    assertions.sometimes(gate2, "gate 2 opens")
    if not gate2:
        continue
    gate3 = random.get_random() % 6 == 0
    assertions.sometimes(gate3, "gate 3 opens")
    if gate3:
        assertions.always(False, "the vault stays closed", {"gates": 3})

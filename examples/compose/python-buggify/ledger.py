"""A ledger that counts deposits, with a BUGGIFY site where a real one
would lose a deposit under stress (a dropped write, a lost reply). It fails
only when hvsim fires the site: enabled in 1 timeline in 4, then firing 1
time in 4 it is reached. Uses hvsim's Python SDK (guest-sdk/python).
"""

import sys
import time

sys.path.insert(0, "/sdk")
import hvsim_sdk as hvsim  # noqa: E402

DEPOSITS = 12

hvsim.setup_complete({"service": "ledger"})
balance = 0
for _ in range(DEPOSITS):
    time.sleep(0.05)
    if hvsim.buggify("ledger: a deposit is lost"):
        continue
    balance += 1
hvsim.always(balance == DEPOSITS, "every deposit is counted", {"balance": balance})
print(f"balance {balance} of {DEPOSITS}", flush=True)
sys.exit(0 if balance == DEPOSITS else 1)

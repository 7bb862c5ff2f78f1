#!/bin/bash
# Five transfers, alone (Test Composer runs a serial driver with no other
# driver): the same requests never interleave, and the total holds.
# shellcheck source=helper_transfer.sh
. "${0%/*}/helper_transfer.sh"
transfers 5

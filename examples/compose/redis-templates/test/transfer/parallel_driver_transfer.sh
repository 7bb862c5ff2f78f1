#!/bin/bash
# Five transfers, beside other drivers: nothing makes a transfer run
# alone, so two transfers whose writes interleave make or lose money.
# shellcheck source=helper_transfer.sh
. "${0%/*}/helper_transfer.sh"
transfers 5

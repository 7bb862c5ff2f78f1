#!/bin/sh
# Faults are stopped and the drivers have finished: within a minute every
# replica reaches r0's offset, whatever partitions the timeline had.
exec sh "$(dirname "$0")/helper_converged.sh" 60

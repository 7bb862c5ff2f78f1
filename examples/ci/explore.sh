#!/bin/sh
# A CI job's exploration step: explore, fail the job when a bug is found,
# and leave the results in hvsim-out/latest for the job to keep as
# artifacts (report.html to read, bugs/ to replay with `hvsim replay`).
#
#   examples/ci/explore.sh --compose compose.yaml --branches 200
#
# HVSIM names the hvsim binary (default: hvsim on the PATH); the arguments
# go to `hvsim explore`. The exit statuses are docs/cli.md's.
set -u
hvsim=${HVSIM:-hvsim}
"$hvsim" explore --out hvsim-out "$@"
status=$?
case $status in
  0) echo "ci: no bug found" ;;
  8) echo "ci: bugs found:"; ls hvsim-out/latest/bugs ;;
  9) echo "ci: interrupted before the budget was spent, no bug found" ;;
  10) echo "ci: no bug, but a property was never satisfied or never reached" ;;
  *) echo "ci: hvsim failed (exit status $status)" ;;
esac
exit $status

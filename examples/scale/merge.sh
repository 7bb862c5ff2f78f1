#!/bin/sh
# Merges the shards of a sharded exploration (docs/scale.md) into one
# result, as if one exploration had run every branch:
#
#   hvsim merge $HVSIM_RESULTS/shard-*/latest --out $HVSIM_RESULTS/merged
#
# HVSIM_MERGED names another output directory (default
# $HVSIM_RESULTS/merged); it must not exist or be empty: a second merge into
# the same place is refused, so give each merge its own. Arguments go to
# `hvsim merge` (--fail-on-unmet, --json). The other settings are
# common.sh's.
#
# A shard whose directory holds no finished exploration (it failed, or was
# killed, before writing exploration.json) is left out, and the merge reports it missing, as it does a shard
# that never ran.
#
# Exit status: hvsim merge's, passed on, as `hvsim explore`'s
# (docs/cli.md): 0 no bug in any shard, 8 at least one bug (the job fails,
# as an unsharded exploration's would), 9 no bug but a shard interrupted
# before its end, 10 with --fail-on-unmet: no bug, but
# a property unmet in every shard or a claim that did not pass, 1 refused
# (shards of different explorations or worlds, the same shard twice, MERGED
# not empty) or an error, 2 a usage error.
set -eu
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

merged=${HVSIM_MERGED:-$results/merged}
found=0
for dir in "$results"/shard-*; do
  # A shard that failed or was killed leaves no exploration.json (its
  # latest may hold only error.txt): left out, and the merge reports it
  # missing.
  if [ -f "$dir/latest/exploration.json" ]; then
    set -- "$@" "$dir/latest"
    found=$((found + 1))
  elif [ -d "$dir" ]; then
    echo "merge.sh: $dir holds no finished exploration (no latest/exploration.json): left out" >&2
  fi
done
if [ "$found" -eq 0 ]; then
  die "no shard results in $results (shard-*/latest/exploration.json): run the shards first"
fi

status=0
"$hvsim" merge "$@" --out "$merged" || status=$?
case $status in
  0) echo "merge.sh: merged $found shard(s), no bug; report: $merged/report.html" ;;
  8) echo "merge.sh: merged $found shard(s), bugs found (exit status 8); report: $merged/report.html" ;;
  9) echo "merge.sh: merged $found shard(s), no bug, but a shard was interrupted before its end (exit status 9); report: $merged/report.html" ;;
  10) echo "merge.sh: merged $found shard(s), no bug, but a property or claim unmet (exit status 10); report: $merged/report.html" ;;
  *) echo "merge.sh: hvsim merge failed (exit status $status)" >&2 ;;
esac
exit "$status"

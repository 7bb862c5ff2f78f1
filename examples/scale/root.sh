#!/bin/sh
# The root step of a sharded exploration (docs/scale.md): runs the target
# once to setup complete and saves that machine in $HVSIM_RESULTS/roots, for
# every shard to start from. Run it once, before the shards, with the same
# hvsim and the same settings (common.sh), on the same machine type: a shard
# refuses a root made by another hvsim or on another world.
#
#   HVSIM_RESULTS=/shared/run1 sh root.sh
#
# A raw (built-in) guest such as the default demo needs no root: the step
# then saves nothing and takes a moment. It is run anyway, so that every
# target goes through the same three steps.
#
# Arguments go to `hvsim explore`. Exit status: 0 when the root is saved;
# otherwise hvsim's (docs/cli.md): 8 when a bug came before setup complete
# (there is no root to shard from: the bug is in $HVSIM_RESULTS/root/latest),
# 1 when the target could not start, 2 for a usage error.
set -eu
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

mkdir -p "$roots"
out=$results/root
eval "set -- $target_args $extra_args"' "$@"'
status=0
"$hvsim" explore "$@" --seed "$seed" --branches 0 --roots "$roots" --out "$out" || status=$?
case $status in
  0) echo "root.sh: the root of seed $seed is in $roots: start the shards" ;;
  8) echo "root.sh: a bug before setup complete, so no root to shard from: see $out/latest/" >&2 ;;
  *) echo "root.sh: hvsim explore failed (exit status $status): see $out/latest/ (error.txt)" >&2 ;;
esac
exit "$status"

#!/bin/sh
# Reads the counter from one leaf five times, half a second apart, each
# time after reading r0's. A leaf applies r0's writes in order, so its
# value never goes back; and sometimes (a partition between it and r0, or
# a write still on its way down the tree) it is behind r0.
leaf=$(printf 'l%02d' "$(shuf -i 1-59 -n 1)")
last=0
for round in 1 2 3 4 5; do
  root=$(redis-cli -h r0 get v)
  value=$(redis-cli -h "$leaf" get v)
  echo "round $round: r0 $root, $leaf $value"
  behind=false
  [ "${value:-0}" -lt "${root:-0}" ] && behind=true
  echo "{\"antithesis_assert\":{\"id\":\"a leaf serves a read behind r0\",\"message\":\"a leaf serves a read behind r0\",\"condition\":$behind,\"hit\":true,\"must_hit\":true,\"assert_type\":\"sometimes\",\"display_type\":\"Sometimes\",\"location\":{},\"details\":{\"leaf\":\"$leaf\",\"leaf_value\":${value:-0},\"r0_value\":${root:-0}}}}" > "$HVSIM_SDK_OUTPUT"
  if [ "${value:-0}" -lt "$last" ]; then
    echo "$leaf went back from $last to $value"
    exit 1
  fi
  last=${value:-0}
  sleep 0.5
done

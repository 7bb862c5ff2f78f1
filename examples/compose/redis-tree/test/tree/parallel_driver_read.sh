#!/bin/sh
# Reads the counter from a leaf, then from r0, then from the leaf again. A
# leaf applies r0's writes in order, so it never goes back; and sometimes
# (a partition between it and r0, or a write still on its way down the
# tree) it is behind r0.
leaf=$(printf 'l%02d' "$(shuf -i 1-59 -n 1)")
a=$(redis-cli -h "$leaf" get v)
root=$(redis-cli -h r0 get v)
b=$(redis-cli -h "$leaf" get v)
echo "$leaf read $a, r0 $root, $leaf again $b"
behind=false
[ "${b:-0}" -lt "${root:-0}" ] && behind=true
echo "{\"antithesis_assert\":{\"id\":\"a leaf serves a read behind r0\",\"message\":\"a leaf serves a read behind r0\",\"condition\":$behind,\"hit\":true,\"must_hit\":true,\"assert_type\":\"sometimes\",\"display_type\":\"Sometimes\",\"location\":{},\"details\":{\"leaf\":\"$leaf\",\"leaf_value\":${b:-0},\"r0_value\":${root:-0}}}}" > "$HVSIM_SDK_OUTPUT"
if [ "${b:-0}" -lt "${a:-0}" ]; then
  echo "$leaf went back from $a to $b"
  exit 1
fi

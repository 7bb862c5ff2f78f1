#!/bin/sh
# Increments the counter on r0 ten times, a few tenths of a second apart,
# so that the writes span the partitions drawn meanwhile (the client is
# never cut off).
for i in 1 2 3 4 5 6 7 8 9 10; do
  redis-cli -h r0 incr v > /dev/null || { echo "increment $i failed"; exit 1; }
  sleep 0.3
done

#!/bin/sh
# Increments the counter on r0 three times (the client is never cut off).
for i in 1 2 3; do
  redis-cli -h r0 incr v > /dev/null || { echo "increment $i failed"; exit 1; }
done

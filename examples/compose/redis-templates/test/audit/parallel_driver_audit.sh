#!/bin/bash
# Reads both accounts in one request, three times: Redis runs MGET alone,
# so each read sees a total; with no transfer running it is 100.
# shellcheck source=helper_redis.sh
. "${0%/*}/helper_redis.sh"
for i in 1 2 3; do
  redis mget x y
  read -r x y <<< "$reply"
  echo "audit $i: x=$x y=$y"
  [ $((x + y)) = 100 ] || exit 1
  think
done

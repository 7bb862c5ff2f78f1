#!/bin/bash
# Faults have stopped and every driver has ended: once the store answers
# again, every write it acknowledged must still be there.
# shellcheck source=helper_redis.sh
. "${0%/*}/helper_redis.sh"
until redis ping 2>/dev/null && [ "$reply" = +PONG ]; do sleep 0.2; done
acks=0 lost=0
while read -r key; do
  acks=$((acks + 1))
  redis get "$key"
  if [ "$reply" = '$-1' ]; then
    echo "lost: $key"
    lost=$((lost + 1))
  fi
done < /tmp/acks
echo "$acks acknowledged writes, $lost lost"
[ "$lost" = 0 ]

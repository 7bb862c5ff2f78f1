#!/bin/bash
# Three deposits of 1 into the third account (INCRBY, which Redis runs
# alone); each one the store acknowledged is recorded in /tmp/deposits.
# shellcheck source=../audit/helper_redis.sh
. "${0%/*}/../audit/helper_redis.sh"
for i in 1 2 3; do
  redis incrby deposits 1
  [ -n "$reply" ] && echo "$$ $i" >> /tmp/deposits
  think
done

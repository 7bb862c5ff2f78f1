#!/bin/bash
# Every transfer has ended: the accounts still hold 100 between them.
# shellcheck source=../audit/helper_redis.sh
. "${0%/*}/../audit/helper_redis.sh"
redis mget x y
read -r x y <<< "$reply"
echo "total: x=$x y=$y"
[ $((x + y)) = 100 ]

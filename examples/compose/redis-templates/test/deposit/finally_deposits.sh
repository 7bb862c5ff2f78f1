#!/bin/bash
# Every driver has ended: the account holds every acknowledged deposit.
# shellcheck source=../audit/helper_redis.sh
. "${0%/*}/../audit/helper_redis.sh"
redis get deposits
acked=0
[ -e /tmp/deposits ] && mapfile -t acks < /tmp/deposits && acked=${#acks[@]}
echo "deposits: $reply in the store, $acked acknowledged"
[ "$reply" = "$acked" ]

#!/bin/sh
# What the replica says of its link to the primary, and the counter there.
redis-cli -h replica info replication | grep -E 'master_link_status|master_repl_offset' | tr -d '\r'
echo "replica counter: $(redis-cli -h replica get counter)"

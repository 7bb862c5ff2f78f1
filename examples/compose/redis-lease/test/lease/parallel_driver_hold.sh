#!/bin/bash
# Takes the lease three times: acquire (SET NX PX, a 1000 ms term), work
# for 100 to 600 ms, release (a script that deletes the key only if it
# still names this driver). Each acquire and release is recorded as an
# `hvsim_history` event (the lease model: an acquire's value is its term in
# milliseconds); hvsim stamps each with virtual time. bash speaks Redis's
# protocol over /dev/tcp itself: a process per request would cost seconds
# where guest kernel code is emulated.
TERM_MS=1000
RELEASE='if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end'

sdk() { echo "$1" > "$HVSIM_SDK_OUTPUT"; }

# history TYPE F VALUE: one event of this driver's.
history() { sdk "{\"hvsim_history\":{\"process\":$$,\"type\":\"$1\",\"f\":\"$2\",\"key\":\"lease\",\"value\":$3}}"; }

# request ARGS...: one request on a new connection, in Redis's request
# format; the reply's first line in $reply (empty if the store did not
# answer within 5 s).
request() {
  reply=
  exec 3<>/dev/tcp/store/6379 || return 1
  local r="*$#"$'\r\n'
  for a in "$@"; do r+="\$${#a}"$'\r\n'"$a"$'\r\n'; done
  printf '%s' "$r" >&3
  IFS=$'\r' read -r -t 5 reply <&3
  exec 3<&-
}

# work MS: hold the lease that long (bash's read timing out on a FIFO
# nobody writes: a monotonic timer, no process started).
work() {
  if [ -z "${WORK_FD:-}" ]; then
    mkfifo "/tmp/work.$$" && exec {WORK_FD}<>"/tmp/work.$$"
  fi
  read -r -t "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))" -u "$WORK_FD" _ || true
}

for _ in 1 2 3; do
  history invoke acquire "$TERM_MS"
  request SET lease "$$" NX PX "$TERM_MS"
  case "$reply" in
    +OK)
      history ok acquire "$TERM_MS"
      work $((100 + RANDOM % 500))
      history invoke release null
      request EVAL "$RELEASE" 1 lease "$$"
      case "$reply" in
        :1) history ok release null ;;
        # Nothing to release: the lease had already gone.
        :0) history fail release null ;;
        *) history info release null; exit 0 ;;
      esac
      ;;
    \$-1) history fail acquire "$TERM_MS"; work $((RANDOM % 100)) ;;
    # No answer: it may be held in our name; this driver stops.
    *) history info acquire "$TERM_MS"; exit 0 ;;
  esac
done

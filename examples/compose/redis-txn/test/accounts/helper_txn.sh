# shellcheck shell=bash
# Sourced by the template's commands: `txn OP...` runs one transaction
# against the store and records it in the run's history (`hvsim_history`
# SDK events, list-append format), as process $$ (one per driver). An OP
# is `r KEY` or `append KEY ELEMENT`.
#
# TXN=atomic sends the whole transaction as one Lua script (EVAL), which
# Redis runs alone; TXN=steps sends each micro-operation as its own script,
# as an application that never asked for a transaction would. bash speaks
# Redis's protocol over /dev/tcp itself: a process per request would cost
# seconds where guest kernel code is emulated.

# Runs ARGV's micro-operations (triples: f, key, element or "-") in order
# and returns them, reads filled in, as the JSON of a list-append
# transaction.
SCRIPT='local out = {}
for i = 1, #ARGV, 3 do
  local f, k, v = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if f == "append" then
    redis.call("RPUSH", k, v)
    out[#out + 1] = "[\"append\",\"" .. k .. "\"," .. v .. "]"
  else
    local l = redis.call("LRANGE", k, 0, -1)
    out[#out + 1] = "[\"r\",\"" .. k .. "\",[" .. table.concat(l, ",") .. "]]"
  end
end
return table.concat(out, ",")'

sdk() { echo "$1" > "$HVSIM_SDK_OUTPUT"; }

# history TYPE VALUE: one event of this driver's transaction.
history() { sdk "{\"hvsim_history\":{\"process\":$$,\"type\":\"$1\",\"f\":\"txn\",\"value\":[$2]}}"; }

# eval_script ARGS...: EVAL of $SCRIPT with ARGS on a new connection, in
# Redis's request format; its reply's JSON in $reply (empty if the store
# did not answer within 5 s).
eval_script() {
  reply=
  exec 3<>/dev/tcp/store/6379 || return 1
  local request="*$(($# + 3))"$'\r\n'
  for a in EVAL "$SCRIPT" 0 "$@"; do
    request+="\$${#a}"$'\r\n'"$a"$'\r\n'
  done
  printf '%s' "$request" >&3
  local head
  IFS=$'\r' read -r -t 5 head <&3 && [[ $head == \$* ]] && IFS=$'\r' read -r -t 5 reply <&3
  exec 3<&-
}

# think: up to 50 ms between one request and the next, as an application
# computes what to write from what it read (bash's read timing out on a
# FIFO nobody writes: no process started).
think() {
  if [ -z "${THINK_FD:-}" ]; then
    mkfifo "/tmp/think.$$" && exec {THINK_FD}<>"/tmp/think.$$"
  fi
  read -r -t "0.0$((RANDOM % 5))$((RANDOM % 10))" -u "$THINK_FD" _ || true
}

txn() {
  local args=() invoke=() results=()
  while [ $# -gt 0 ]; do
    case "$1" in
      r) args+=(r "$2" -); invoke+=("[\"r\",\"$2\",null]"); shift 2 ;;
      append) args+=(append "$2" "$3"); invoke+=("[\"append\",\"$2\",$3]"); shift 3 ;;
    esac
  done
  local joined
  joined=$(IFS=,; echo "${invoke[*]}")
  history invoke "$joined"
  if [ "${TXN:-atomic}" = atomic ]; then
    eval_script "${args[@]}"
    results=("$reply")
  else
    for ((i = 0; i < ${#args[@]}; i += 3)); do
      ((i == 0)) || think
      eval_script "${args[@]:i:3}"
      [ -n "$reply" ] || break
      results+=("$reply")
    done
  fi
  if [ -n "$reply" ]; then
    history ok "$(IFS=,; echo "${results[*]}")"
  else
    # No answer: the transaction may or may not have taken effect.
    history info "$joined"
    exit 0
  fi
}

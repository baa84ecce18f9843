# Shared by the server scripts (sourced): stop a server by DIR/pid.
# The caller defines `is_our_server PID` (is that PID still our server process?) and `die`.

# stop_server NAME DIR: SIGTERM, wait up to 30 s, then SIGKILL; removes DIR/pid.
stop_server() {
  local name=$1 dir=$2 pid
  [ -f "$dir/pid" ] || { echo "$name: not running (no $dir/pid)" >&2; return 0; }
  pid=$(cat "$dir/pid")
  if is_our_server "$pid"; then
    kill "$pid"
    for _ in $(seq 1 60); do is_our_server "$pid" || break; sleep 0.5; done
    if is_our_server "$pid"; then kill -9 "$pid"; sleep 0.5; fi
    is_our_server "$pid" && die "could not stop pid $pid"
  fi
  rm -f "$dir/pid"
}

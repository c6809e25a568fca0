#!/usr/bin/env bash
# A benchmark longer than one 10-minute device command: start it detached, then wait for it over later commands on
# the same (warm) machine. One process keeps its builds, goldens and compiled graphs for the whole run.
#   bash benchmarks/detach.sh start NAME CMD [ARGS...]   # from a copy of the tree in /tmp/detached/NAME/tree (so a
#                                                         # re-sent tree never changes files under the running job)
#   bash benchmarks/detach.sh wait NAME SECONDS [REGEX]   # until the job ends, its log matches REGEX, or SECONDS pass
#   bash benchmarks/detach.sh stop NAME                   # end the job (its whole process group)
# `wait` and `stop` copy the job's log and every file the job wrote under /tmp/detached/NAME/out (its $JOB_OUT) to
# $OUT, and print the log's tail and whether the job still runs. The job runs in its own session (setsid), which a
# device command's end does not kill; the machine must be asked again within its idle limit, or it is given back.
set -u
cmd=${1:?start, wait or stop}; name=${2:?a job name}
dir=/tmp/detached/$name; OUT=${OUT:-out}; mkdir -p "$OUT"
collect() {
  [ -f "$dir/log" ] && cp "$dir/log" "$OUT/$name.log"
  [ -d "$dir/out" ] && cp -r "$dir/out/." "$OUT/" 2>/dev/null
  tail -n 15 "$dir/log" 2>/dev/null
  if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then echo "[$name] still running"
  else echo "[$name] ended: rc=$(cat "$dir/rc" 2>/dev/null || echo '?')"; fi
}
case "$cmd" in
  start)
    shift 2; [ $# -gt 0 ] || { echo "no command given" >&2; exit 2; }
    rm -rf "$dir"; mkdir -p "$dir/out" "$dir/tree"
    cp -a . "$dir/tree/" || exit 1
    printf '%q ' "$@" > "$dir/cmd"
    (cd "$dir/tree" && JOB_OUT="$dir/out" setsid bash -c 'echo $$ > "$0/pid"; eval "$(cat "$0/cmd")"; echo $? > "$0/rc"' \
      "$dir" > "$dir/log" 2>&1 < /dev/null &)
    sleep 1; echo "[$name] started: pid $(cat "$dir/pid" 2>/dev/null), log $dir/log" ;;
  wait)
    limit=${3:?seconds}; regex=${4:-}; start=$SECONDS
    while [ $((SECONDS - start)) -lt "$limit" ]; do
      [ -f "$dir/rc" ] && break
      [ -n "$regex" ] && grep -qE "$regex" "$dir/log" 2>/dev/null && break
      sleep 5
    done
    collect ;;
  stop)
    [ -f "$dir/pid" ] && kill -- -"$(cat "$dir/pid")" 2>/dev/null; sleep 2; collect ;;
  *) echo "unknown: $cmd (start, wait or stop)" >&2; exit 2 ;;
esac

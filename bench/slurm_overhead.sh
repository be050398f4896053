#!/usr/bin/env bash
# What running nodes as Slurm jobs costs, on a one-machine cluster on loopback
# (bench/slurm_cluster.sh) and an nginx WebDAV cache, both started here and stopped by pid:
#   1. per-job overhead: `sbatch --wait` of `true` (submit to end, as the build sees it) and
#      `srun true`, JOBS times each, medians in ms;
#   2. a generated graph of NODES small command nodes (bench/pipeline_gen.py layersNODES: 50
#      a layer) built locally and with `--execute slurm` (fresh workspace, empty cache each):
#      wall seconds, jobs per second, and the cost per node over a local build;
#   3. this repository's release pipeline from a fresh clone (`git clone` of HEAD, sharing this
#      checkout's .venv for the cuda-ptx node), built locally and with `--execute slurm` (an
#      empty store and cache each): wall seconds, jobs, and whether every output but the
#      timings (bench.json) is byte-identical (cargo's scratch, build/web/target, aside).
#      RELEASE=0 leaves it out.
#
#   SKYCTL=target/release/skyctl JOBS=20 NODES=200 bash bench/slurm_overhead.sh
#
# Needs a release skyctl, nginx, slurmctld slurmd slurm-client munge (Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SKYCTL=${SKYCTL:-$REPO/target/release/skyctl}
JOBS=${JOBS:-20}
NODES=${NODES:-200}
[ -x "$SKYCTL" ] || { echo "no skyctl at $SKYCTL (cargo build --release -p skyctl)" >&2; exit 2; }
SKYCTL=$(realpath "$SKYCTL")
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "nginx missing: apt-get install nginx" >&2; exit 2; }
unset SKYCTL_STORE SKYCTL_REMOTE_CACHE SKYCTL_REMOTE_CACHE_READ_ONLY SKYCTL_REMOTE_CACHE_HEADER \
  SKYCTL_REMOTE_CACHE_SIGNING_KEY SKYCTL_REMOTE_CACHE_TIMEOUT

W=$(mktemp -d /tmp/skyctl-slurm-bench.XXXXXX)
NGINX_PID=
cleanup() {
  bash "$REPO/bench/slurm_cluster.sh" stop "$W/cluster" || true
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

eval "$(bash "$REPO/bench/slurm_cluster.sh" start "$W/cluster")"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$W/ngx/data" "$W/ngx/tmp"
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
cat > "$W/ngx/nginx.conf" <<CONF
daemon off; master_process off; $user
pid $W/ngx/nginx.pid; error_log $W/ngx/error.log warn;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path $W/ngx/tmp/body; proxy_temp_path $W/ngx/tmp/p; fastcgi_temp_path $W/ngx/tmp/f;
  uwsgi_temp_path $W/ngx/tmp/u; scgi_temp_path $W/ngx/tmp/s;
  client_max_body_size 0; keepalive_requests 100000;
  server {
    listen 127.0.0.1:$PORT; root $W/ngx/data;
    location / { dav_methods PUT; create_full_put_path on; dav_access user:rw group:r all:r; }
  }
}
CONF
"$NGINX" -p "$W/ngx" -c "$W/ngx/nginx.conf" -e "$W/ngx/error.log" & NGINX_PID=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
BASE=http://127.0.0.1:$PORT

ms() { date +%s%3N; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

sb=""; sr=""
for _ in $(seq "$JOBS"); do
  t0=$(ms); sbatch --wait --parsable -o /dev/null --wrap true >/dev/null; sb="$sb $(( $(ms) - t0 ))"
  t0=$(ms); srun true; sr="$sr $(( $(ms) - t0 ))"
done
echo "per job ($JOBS each): sbatch --wait true median $(echo "$sb" | median) ms; srun true median $(echo "$sr" | median) ms"

gen() { rm -rf "$1"; python3 "$REPO/bench/pipeline_gen.py" "$1" "layers$NODES" >/dev/null; }
build_s() {
  local dir=$1; shift
  local t0; t0=$(ms)
  (cd "$dir" && "$SKYCTL" build "$@" >/dev/null 2>"$W/last.err") || { cat "$W/last.err" >&2; exit 1; }
  echo "scale=2; ($(ms) - $t0) / 1000" | bc
}
gen "$W/local"; local_s=$(build_s "$W/local" --remote-cache off)
gen "$W/slurm"; slurm_s=$(build_s "$W/slurm" --execute slurm --remote-cache "$BASE/c1")
jobs=$(grep -c 'JobState=COMPLETED' "$W/cluster/jobcomp.txt" || true)
jobs=$(( jobs - JOBS * 2 ))
echo "layers$NODES: local build ${local_s} s; --execute slurm ${slurm_s} s ($jobs jobs, $(echo "scale=1; $jobs / $slurm_s" | bc) jobs/s, $(echo "scale=0; ($slurm_s - $local_s) * 1000 / $NODES" | bc) ms a node over local)"

if [ "${RELEASE:-1}" = 1 ]; then
  completed() { grep -c 'JobState=COMPLETED' "$W/cluster/jobcomp.txt" || true; }
  fresh_clone() { rm -rf "$1"; git clone -q "$REPO" "$1"; ln -s "$REPO/.venv" "$1/.venv"; }
  outputs() { (cd "$1" && find build site/public -type f ! -name bench.json ! -path 'build/web/target/*' -print0 | sort -z | xargs -0 sha256sum); }
  fresh_clone "$W/rel-local"; rel_local_s=$(build_s "$W/rel-local" --remote-cache off)
  before=$(completed)
  fresh_clone "$W/rel-slurm"; rel_slurm_s=$(build_s "$W/rel-slurm" --execute slurm --remote-cache "$BASE/c2")
  rel_jobs=$(( $(completed) - before ))
  if [ "$(outputs "$W/rel-local")" = "$(outputs "$W/rel-slurm")" ]; then
    same=identical
  else
    same="DIFFERENT: $(diff <(outputs "$W/rel-local") <(outputs "$W/rel-slurm") | grep '^[<>]' | awk '{print $1, $3}' | sort -k2 | tr '\n' ' ' || true)"
  fi
  echo "release pipeline ($(git -C "$REPO" rev-parse --short HEAD)): local build ${rel_local_s} s; --execute slurm ${rel_slurm_s} s ($rel_jobs jobs); every output but bench.json: $same"
fi

#!/usr/bin/env bash
# Instructions the server spends on a fixed agent-span load, counted by callgrind: the same
# build, load and seed give the same counts within a fraction of a percent, whatever else the
# machine is doing, so two builds can be compared where the matrix's spans per CPU-second are
# too noisy. stepline runs under `valgrind --tool=callgrind` with a durable store and an
# `interp_bench capture` receiver as its forwarding sink; `loadgen` sends RUNS Pydantic-AI-shaped
# 20-span runs (seed 7, 4 connections); the totals and the writer's main parts are printed.
#
#   cargo build --release --bin stepline --example loadgen --example interp_bench
#   benches/ingest_callgrind.sh [BIN] [RUNS] [DIR]
#
# BIN defaults to the release build, RUNS to 100, DIR (kept: callgrind.out, logs) to a new
# temporary directory. Under callgrind SHA-256 runs its portable code (valgrind does not offer
# the CPU's SHA instructions), so message and node hashing weigh far more here than natively.
set -euo pipefail
target=${CARGO_TARGET_DIR:-$HOME/.cache/stepline/target}/release
bin=${1:-$target/stepline}
runs=${2:-100}
dir=${3:-$(mktemp -d)}
mkdir -p "$dir"
rm -rf "$dir/data"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sink=$(port) grpc=$(port) http=$(port) api=$(port)
"$target/examples/interp_bench" capture "127.0.0.1:$sink" "$dir/sink.bin" >"$dir/sink.log" 2>&1 &
sink_pid=$!
cat >"$dir/collector.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: { endpoint: 127.0.0.1:$grpc }
      http: { endpoint: 127.0.0.1:$http }
processors:
  stepline: {}
exporters:
  otlp/sink:
    endpoint: http://127.0.0.1:$sink
    compression: none
extensions:
  stepline_storage: { directory: $dir/data, sync: true }
  stepline_api: { endpoint: 127.0.0.1:$api }
service:
  extensions: [stepline_storage, stepline_api]
  pipelines:
    traces: { receivers: [otlp], processors: [stepline], exporters: [otlp/sink] }
YAML
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
  "$bin" --config "$dir/collector.yaml" >"$dir/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" "$sink_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$api/healthz', timeout=1)" 2>/dev/null; then
    break
  fi
  sleep 0.5
done
"$target/examples/loadgen" --transport grpc --grpc "127.0.0.1:$grpc" --api "127.0.0.1:$api" \
  --runs "$runs" --seed 7 --concurrency 4 >"$dir/loadgen.log" 2>&1
tail -n 1 "$dir/loadgen.log" | grep -q '"ok":true' || { echo "loadgen failed: $dir/loadgen.log" >&2; exit 1; }
sleep 3
kill -TERM "$server_pid"
wait "$server_pid" || true
echo "instructions, $runs runs of 20 agent spans ($dir/callgrind.out):"
callgrind_annotate --inclusive=yes "$dir/callgrind.out" 2>/dev/null |
  grep -E 'PROGRAM TOTALS|ingest::writer::run |apply::facts::add_fact |persist::write_run |core::Store::write_batch |interpreter::interpret |receiver::decode::decode_request ' |
  sed -E 's/ \[[^]]*\]$//; s/\?\?\?://'

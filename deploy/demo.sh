#!/usr/bin/env bash
# The main job, end to end on one machine: installs dependencies, builds,
# generates a TinyLlama-1.1B-shaped random-weight Q4_0 model (once), answers
# a prompt with it in one process, then starts a local cluster of 3 agents
# (paired with their own keys), answers the same prompt through the head,
# shows every device's share of the work and tears the cluster down.
# Usage: deploy/demo.sh ["prompt text"]
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
mkdir -p models
model=models/tinyllama-shape-q4_0.gguf
vocab_args=()
if [ -f ../shared/models/tiny-llama-f32.gguf ]; then
  vocab_args=(--vocab ../shared/models/tiny-llama-f32.gguf)
fi
if [ ! -f "$model" ]; then
  ./build/hearth mkmodel -o "$model" --shape tinyllama --type q4_0 "${vocab_args[@]}"
fi
./build/hearth info -m "$model"
prompt=${1:-"Once upon a time, there was a little robot who lived in a box."}
echo "== prompt: $prompt"
./build/hearth run -m "$model" -p "$prompt" -n 48 --temp 0.8 --seed 7
# The same model on a local cluster of 3 agents (loopback ports 7700..7720),
# answered through the head with `hearth prompt`, then torn down.
echo "== cluster: 3 agents on this machine"
export HEARTH=$PWD/build/hearth
trap 'bash deploy/cluster.sh stop >/dev/null 2>&1 || true' EXIT
# Three agents on one machine share its cores, so the planner alone would
# (rightly) keep every layer on the head; --windows forces a 3-way split so
# the demo shows a real ring. On separate machines, leave it out.
bash deploy/cluster.sh start -m "$model" -n 3 -p 7700 --profile -- --ctx 512 --windows 8,7,7
bash deploy/cluster.sh prompt -n 48 --temp 0.8 --seed 7 "$prompt"
echo "== every device's share of the work"
bash deploy/cluster.sh status
bash deploy/cluster.sh stop

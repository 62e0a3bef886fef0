#!/usr/bin/env bash
# Issue 27's device calls, one per argument, each inside the device's 600 s limit (run from the repository
# root; results under $OUT when it is set). The opt-in paths waiting for their GPU smoke run are switched
# on by environment variables (models/kernels.py); each measurement runs with and without them, side by
# side in one call. Sessions 15 and 16 lost their device scripts with their untracked folders: this one
# is tracked.
#
#   bash benchmarks/device_calls.sh cycle      # ~420 s: the speculative cycle, four ways
#   bash benchmarks/device_calls.sh steps      # ~200 s: split-KV kernels, decode steps
#   bash benchmarks/device_calls.sh probe      # ~400 s: the probe row, graphs captured through torch.cuda.graph and lean
#   bash benchmarks/device_calls.sh smoke-on   # ~450 s: the smoke run with every switch on
#   bash benchmarks/device_calls.sh smoke-off  # ~330 s: the smoke run of the default paths (toy)
#
# TOY=DIR gives the smoke the toy pair (target/ and drafter/; copy ~/.cache/draftlab/toy-v1-seed0-py311 into
# an ignored folder and carry it) instead of training it there.
set -euo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # after carried wheels, if any
out="${OUT:-/tmp/device-out}"
mkdir -p "$out"
on=(DRAFTLAB_ATTENTION=split-kv DRAFTLAB_DRAFTER=compiled DRAFTLAB_CYCLE=pipelined DRAFTLAB_CAPTURE=lean)
toy=(${TOY:+--toy "$TOY"})

case "${1:?which call: cycle, steps, probe, smoke-on or smoke-off}" in
  cycle)  # the 3/1/4 and 5/4/8 cycles against the floor of their parts, adding one switch at a time
    cd benchmarks
    for n in 0 1 2 3; do
      echo "== switches: ${on[*]:0:$n}"
      env "${on[@]:0:$n}" python3 spec_cycle.py --device cuda --configs 3/1/4,5/4/8 --compile-verify
    done ;;
  steps)  # attention kernels alone; the decode steps
    python3 benchmarks/split_kv_speed.py
    (cd benchmarks && env "${on[0]}" python3 decode_profile.py --device cuda --variants fused+compiled) ;;
  probe)  # the probe against its floor and against generate; graph_capture_s and graph_warmup_s per run
    for capture in torch lean; do
      env "${on[0]}" DRAFTLAB_CAPTURE=$capture python3 benchmarks/probe_floor.py --workdir "/tmp/pf-$capture" \
        --generate-prompts 2 --probe-runs 2 --no-phases --out "$out/probe_floor_$capture.json"
      rm -rf "/tmp/pf-$capture"  # 16 GB of weights
    done ;;
  smoke-on)
    env "${on[@]}" timeout 280 python3 benchmarks/gpu_smoke.py "${toy[@]}" --pairs toy --workers 6 --out "$out/smoke_on_toy.json"
    env "${on[@]}" timeout 160 python3 benchmarks/gpu_smoke.py --pairs llama-3.1-8b:eagle3.1 --workers 4 --only job \
      --out "$out/smoke_on_8b.json" ;;
  smoke-off)
    timeout 320 python3 benchmarks/gpu_smoke.py "${toy[@]}" --pairs toy --workers 6 --out "$out/smoke_off_toy.json" ;;
  *) echo "unknown call $1" >&2; exit 2 ;;
esac

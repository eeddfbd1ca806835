#!/bin/bash
# What the CPU kernel choice changes in a short run's losses, and what pinning it costs.
#
#   tools/benchmarks/cpu_dispatch.sh OUT_DIR [RUNS]
#
# Trains triplet_synthetic (the demo's plain SGR, its model sizes, train.threads=1) for one
# epoch on a small synthetic world under each setting of ATEN_CPU_CAPABILITY (torch's
# vectorised kernels: default = no SIMD, avx2, avx512) and MKL_CBWR (MKL's code path:
# unset = the CPU's best, COMPATIBLE, AVX2), prints every logged loss's largest difference
# from the unpinned run and the median wall seconds of RUNS runs (farm-bench).
set -euo pipefail
out=${1:?usage: cpu_dispatch.sh OUT_DIR [RUNS]}
runs=${2:-3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=${PY:-python}
export PYTHONPATH=$repo OMP_NUM_THREADS=1
mkdir -p "$out"
world=$out/world
[ -d "$world" ] || $py -c "from precomputed.synthetic import make_synthetic; make_synthetic('$world', num_train=200, num_dev=40, num_test=20, seed=0, feature_dim=64)"
settings=("plain" "ATEN_CPU_CAPABILITY=default" "ATEN_CPU_CAPABILITY=avx2" "ATEN_CPU_CAPABILITY=avx512"
          "MKL_CBWR=COMPATIBLE" "MKL_CBWR=AVX2" "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2")
for s in "${settings[@]}"; do
  name=$(echo "$s" | tr ' =' '__')
  args="--cfg triplet_synthetic --set data.root=$world data.dev_images=40 data.train_images=null model.sgraf.img_dim=64 train.warmup_epochs=0 train.epochs=1 train.log_every=1 train.threads=1 eval.test_after_training=false run.out_dir=$out/runs"
  env=(); [ "$s" = plain ] || env=($s)
  rm -rf "$out/runs/$name"
  env "${env[@]}" $py "$repo/tools/train.py" $args run.name=$name > "$out/$name.log" 2>&1
  if command -v farm-bench > /dev/null; then
    env "${env[@]}" farm-bench -n "$runs" --warmup 0 --timeout 900 -- sh -c "rm -rf $out/runs/t_$name; exec $py $repo/tools/train.py $args run.name=t_$name > /dev/null 2>&1" > "$out/$name.time" 2>&1 || true
  fi
done
$py - "$out" "${settings[@]}" <<'PY'
import json, re, sys
from pathlib import Path
out, settings = Path(sys.argv[1]), sys.argv[2:]
def losses(name):
    recs = [json.loads(l) for l in (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if r["event"] == "train"], [r["rsum"] for r in recs if r["event"] == "val"]
base, base_val = losses("plain")
for s in settings:
    name = s.replace(" ", "_").replace("=", "_")
    loss, val = losses(name)
    diff = max(abs(a - b) for a, b in zip(loss, base))
    first = next((i + 1 for i, (a, b) in enumerate(zip(loss, base)) if a != b), None)
    t = (out / f"{name}.time")
    wall = re.search(r"wall[^\n]*", t.read_text()).group(0) if t.exists() else "-"
    print(f"{s:40s} steps {len(loss)} first differing step {first} max |dloss| {diff:.3g} "
          f"last loss {loss[-1]:.6f} dev rsum {val[-1]:.2f} | {wall}")
PY

#!/usr/bin/env bash
# Performance before and after a change, side by side in one run: each benchmark runs in the old tree
# (its own script, with its own .venv), then in this one, then again in both (ABAB), so that a load
# change on the machine shows as a difference between the two rounds rather than as a regression.
#
#   git worktree add --detach ../base REV && make -C ../base setup-test
#   bash benchmarks/before_after.sh ../base [OUTDIR] ["models.py --models resnet18 --batch 1" ...]
#
# Prints each run's output under a header naming the tree and round; OUTDIR (default
# benchmarks/results/before_after) keeps the logs. Benchmarks given after OUTDIR replace the default list;
# one the old tree lacks runs from this tree's benchmarks/ with the old tree's .venv. Run it on a quiet machine.
set -uo pipefail
base=${1:?usage: benchmarks/before_after.sh BASE_TREE [OUTDIR]}
out=${2:-benchmarks/results/before_after}
here=$(pwd)
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} GOMP_SPINCOUNT=10000
benchmarks=(
    "registry_overhead.py"
    "executor_overhead.py --repeats 15"
    "swap_models.py --models resnet18 mobilenet squeezenet"
    "dnnl_ops.py --runs 10"
)
if [ $# -gt 2 ]; then benchmarks=("${@:3}"); fi
for round in 1 2; do
    for bench in "${benchmarks[@]}"; do
        for tree in "$base" "$here"; do
            name=$( [ "$tree" = "$base" ] && echo before || echo after )
            log="$out/${bench%%.py*}-$name-$round.log"
            echo "=== $bench: $name (round $round, $(git -C "$tree" log --oneline -1 | cut -c1-60))"
            script=${bench%% *} args=${bench#"$script"}
            [ -f "$tree/benchmarks/$script" ] && where="$tree/benchmarks" || where="$here/benchmarks"
            (cd "$tree" && timeout 900 .venv/bin/python "$where/$script" $args) 2>&1 | tee "$log"
        done
    done
done

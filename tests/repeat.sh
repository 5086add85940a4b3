#!/usr/bin/env bash
# Run a pytest selection N times, each with a fresh seed, and list the seeds and outcomes.
#
#   tests/repeat.sh N [pytest arguments]     (no arguments: the whole suite)
#   tests/repeat.sh 100 -x tests/test_conformance.py tests/test_gradients.py
#
# Every run gets -q -p no:cacheprovider. A failing run's whole output is kept in $REPEAT_DIR (a fresh
# temporary folder unless set), and its line says how to replay it. Exits 1 if any run failed.
set -u
runs=${1:?usage: tests/repeat.sh N [pytest arguments]}
shift
python=${PYTHON:-.venv/bin/python}
dir=${REPEAT_DIR:-$(mktemp -d -t algoswap-repeat.XXXXXX)}
mkdir -p "$dir"
failed=0
for run in $(seq 1 "$runs"); do
    seed=$("$python" -c 'import random; print(random.SystemRandom().randrange(2**31))')
    out="$dir/run-$run-seed-$seed.txt"
    started=$SECONDS
    if ALGOSWAP_TEST_SEED=$seed "$python" -m pytest -q -p no:cacheprovider "$@" >"$out" 2>&1; then
        outcome=passed
    else
        outcome=FAILED
        failed=$((failed + 1))
    fi
    summary=$(grep -E '(passed|failed|error)' "$out" | tail -1)
    echo "run $run seed $seed $outcome in $((SECONDS - started)) s: $summary"
    if [ "$outcome" = passed ]; then
        rm -f "$out"
    else
        grep -E '^FAILED|^ERROR' "$out" | sed 's/^/    /'
        echo "    output: $out; replay: ALGOSWAP_TEST_SEED=$seed $python -m pytest $*"
    fi
done
echo "$((runs - failed)) of $runs runs passed"
[ "$failed" -eq 0 ]

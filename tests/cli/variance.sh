#!/usr/bin/env bash
# actc variance (ActNN Figure 5): the compression variance of a lossless or
# deterministic policy is exactly zero in every layer while the minibatch
# sampling variance is not; stochastic-rounding policies (when built) give
# positive compression variance that falls with the bits and with per-group
# ranges; bad input fails naming the flag or file.
source "$(dirname "$0")/lib.bash"
D=$TMP
DATA="--limit-train 2048 --threads 2"

# json_vals JSON KEY: every number under KEY, in order (per layer, then the total).
json_vals() { grep -o "\"$2\":[^,}]*" <<<"$1" | cut -d: -f2; }
# table_cols OUT: "compression sampling" of every row of the table (the total last).
table_cols() { awk '/^  parameter /{on = 1; next} on && NF >= 4 {print $(NF-2), $(NF-1)}' <<<"$1"; }
all_zero() { awk '{ if ($1 != 0) bad = 1 } END { exit bad || NR == 0 }'; }
all_pos() { awk '{ if (!($1 > 0)) bad = 1 } END { exit bad || NR == 0 }'; }
# total SPEC [FLAGS]: total compression variance of the mlp under SPEC.
total() {
    local spec=$1 out; shift
    out=$($ACTC variance --model mlp --compress "$spec" --batch 64 --repeats 4 --json $DATA "$@" 2>&1) || {
        echo "$out" | tail -3 >&2; return 1; }
    json_vals "$out" compression | tail -1
}

# ---- lossless and deterministic policies: compression variance exactly 0 ----
for spec in none bf16; do
    json=$($ACTC variance --model mlp --compress $spec --batch 64 --repeats 4 --json $DATA 2>/dev/null); rc=$?
    [ $rc -eq 0 ] || { fail "mlp $spec: exit $rc"; continue; }
    n=$(json_vals "$json" numel | wc -l)
    [ "$n" -eq 7 ] && pass "mlp $spec: 6 parameter tensors and a total" || fail "mlp $spec: $n numel entries"
    json_vals "$json" compression | all_zero && pass "mlp $spec: compression variance 0 in every layer" \
        || fail "mlp $spec: compression variance $(json_vals "$json" compression | tr '\n' ' ')"
    json_vals "$json" sampling | all_pos && pass "mlp $spec: sampling variance > 0 in every layer" \
        || fail "mlp $spec: sampling variance $(json_vals "$json" sampling | tr '\n' ' ')"
    if command -v python3 > /dev/null; then
        python3 -c 'import json, sys; json.loads(sys.argv[1])' "$json" && pass "mlp $spec: valid JSON" || fail "mlp $spec: invalid JSON"
    fi
done
out=$($ACTC variance --model resnet20 --compress bf16 --batch 32 --repeats 3 $DATA 2>/dev/null); rc=$?
rows=$(table_cols "$out")
if [ $rc -ne 0 ]; then fail "resnet20 bf16: exit $rc"
else
    grep -q "model resnet20 .*policy bf16, batch 32, repeats 3" <<<"$out" && pass "resnet20 bf16: header" || fail "resnet20 bf16: header: $(head -1 <<<"$out")"
    [ "$(wc -l <<<"$rows")" -gt 20 ] && pass "resnet20 bf16: $(wc -l <<<"$rows") table rows" || fail "resnet20 bf16: table rows: $out"
    awk '{print $1}' <<<"$rows" | all_zero && pass "resnet20 bf16: compression variance 0 in every layer (batch norm, residuals)" \
        || fail "resnet20 bf16: compression variance not 0: $(grep -v ' 0.000000e+00 ' <<<"$out" | head -3)"
    awk 'END {print $2}' <<<"$rows" | all_pos && pass "resnet20 bf16: total sampling variance > 0" || fail "resnet20 bf16: sampling total"
fi

# ---- stochastic rounding ----
q2=$(total quant:2) || fail "quant:2 run"
q4=$(total quant:4) || fail "quant:4 run"
qt=$(total quant:2,per-tensor) || fail "quant:2,per-tensor run"
echo "mlp total compression variance: quant:2 ${q2:-?}, quant:4 ${q4:-?}, quant:2,per-tensor ${qt:-?}"
awk -v a="${q2:-nan}" 'BEGIN { exit !(a > 0) }' && pass "quant:2: compression variance > 0" || fail "quant:2: compression variance $q2"
# (2^4-1)^2 / (2^2-1)^2 = 25 times less variance at 4 bits (ActNN Eq. 9).
awk -v a="${q2:-nan}" -v b="${q4:-nan}" 'BEGIN { r = a / b; exit !(r > 15 && r < 40) }' \
    && pass "quant:2 / quant:4 variance ratio near 25" || fail "quant:2 $q2 vs quant:4 $q4: ratio not near 25"
awk -v a="${q2:-nan}" -v b="${qt:-nan}" 'BEGIN { exit !(a < b) }' && pass "per-group quant:2 variance < per-tensor" \
    || fail "per-group quant:2 $q2 >= per-tensor $qt"
# Mixed precision at the same 2 bits on average: lower variance than uniform
# 2 bits (ActNN L3 vs L2), after a warm-up that gives it gradient statistics.
r20() { local out; out=$($ACTC variance --model resnet20 --compress "$1" --batch 64 --repeats 6 --warmup 10 --json $DATA 2>/dev/null) \
    && json_vals "$out" compression | tail -1; }
u2=$(r20 quant:2); m2=$(r20 actnn:2)
echo "resnet20 total compression variance: quant:2 ${u2:-?}, actnn:2 ${m2:-?}"
awk -v a="${m2:-nan}" -v b="${u2:-nan}" 'BEGIN { exit !(a > 0 && a < 0.95 * b) }' \
    && pass "actnn:2 (mixed) variance at least 5% below quant:2 (uniform)" || fail "actnn:2 $m2 not 5% below quant:2 $u2"

# ---- a trained checkpoint ----
$ACTC train --model mlp --width 32 --batch 64 --epochs 1 --limit-train 512 --limit-test 64 --progress off \
    --save $D/mlp.ckpt > /dev/null 2>&1 || fail "training a checkpoint"
# The checkpoint's recipe gives the model's width: no --width needed.
out=$($ACTC variance --checkpoint $D/mlp.ckpt --batch 64 --repeats 3 $DATA 2>/dev/null); rc=$?
[ $rc -eq 0 ] && grep -q "model mlp .*weights from $D/mlp.ckpt" <<<"$out" && pass "variance at the weights of a checkpoint" \
    || fail "variance with --checkpoint (exit $rc): $(head -3 <<<"$out")"

# ---- bad input ----
V="$ACTC variance --model mlp --batch 32 $DATA"
expect_fail "repeats 1" "--repeats" $V --repeats 1
expect_fail "unknown policy" "--compress.*unknown compression policy 'zip:3'" $V --compress zip:3
expect_fail "unknown model" "--model.*unknown model 'resnet99'" $ACTC variance --model resnet99
expect_fail "unknown flag" "unknown flag '--repeat'" $V --repeat 3
expect_fail "batch larger than the data" "--batch 4096 is larger than the training set \(2048" $V --batch 4096
expect_fail "missing data" "$D/nope" $V --train-images $D/nope --train-labels $D/nope
expect_fail "checkpoint of another model" "$D/mlp.ckpt holds model mlp.*--model resnet20" $ACTC variance --model resnet20 --checkpoint $D/mlp.ckpt
expect_fail "missing checkpoint" "--checkpoint.*$D/none.ckpt" $V --checkpoint $D/none.ckpt
finish

#!/bin/bash
# actc bench: the harness's rows agree with the single-run commands they
# wrap (to the byte for bytes), a removed row is run again on resume, the
# plots are images, a missing gnuplot leaves the tables, and bad input is
# refused before the first run.
source "$(dirname "$0")/lib.bash"

OUT=$TMP/quick
BUDGET=25165824 # 24 MiB: mlp at batch 4096 with its data does not fit
run_suite() {
    $ACTC bench --models mlp --policies none,gact:4,compact --batches 32,64,4096 --budget 24MiB --steps 2 \
        --threads 1 --out "$OUT" "$@"
}
if ! run_suite > "$TMP/suite.txt" 2>&1; then
    fail "the suite runs"; tail -20 "$TMP/suite.txt"
else
    pass "the suite runs"
fi
CSV=$OUT/results.csv

# col_of CSV KIND,MODEL,POLICY,BATCH COLUMN: that row's field (the policy
# may hold commas of its own).
col_of() {
    python3 - "$1" "$2" "$3" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
kind, model, rest = sys.argv[2].split(",", 2)
policy, batch = rest.rsplit(",", 1)
for r in rows:
    if [r["kind"], r["model"], r["policy"], r["batch_samples"]] == [kind, model, policy, batch]:
        print(r[sys.argv[3]]); break
EOF
}
col() { col_of "$CSV" "$1" "$2"; }
# jnum FILE KEY: the number after "KEY": in the last epoch record of FILE.
jnum() { grep '"event":"epoch"' "$1" | tail -1 | grep -o "\"$2\":[0-9.e+-]*" | head -1 | cut -d: -f2; }

# 9 rows: 2 policies x (3 batches + maxbatch) + compact's n/a.
rows=$(($(wc -l < "$CSV") - 1))
[ "$rows" -eq 9 ] && pass "one row per run (9)" || fail "rows: $rows, expected 9"
[ "$(col train,mlp,compact,0 status)" = n/a ] && pass "compact on mlp: n/a" || fail "compact row: $(col train,mlp,compact,0 status)"
[ "$(col train,mlp,none,4096 status)" = oom ] && pass "batch 4096 over the budget: oom" || fail "batch 4096: $(col train,mlp,none,4096 status)"

# The same runs by hand: the memory figures must be the same bytes.
for pol in none gact:4; do
    extra=""
    [ $pol = gact:4 ] && extra="--estimate-samples 2"
    rm -f "$TMP/direct.jsonl"
    $ACTC train --model mlp --compress $pol --progress off --batch 64 --epochs 2 --limit-train 128 --limit-test 256 \
        $extra --mem-budget $BUDGET --threads 1 --log "$TMP/direct.jsonl" > "$TMP/direct.txt" 2>&1
    same=1
    for pair in context_bytes:context_stored context_none_bytes:context_none allocator_peak_bytes:peak_total; do
        c=${pair%%:*} j=${pair##*:}
        a=$(col "train,mlp,$pol,64" $c) b=$(jnum "$TMP/direct.jsonl" $j)
        [ -n "$a" ] && [ "$a" = "$b" ] || { same=0; echo "  $pol $c: harness '$a', actc train '$b'"; }
    done
    a=$(col "train,mlp,$pol,64" context_act_bytes)
    b=$(grep '"event":"epoch"' "$TMP/direct.jsonl" | tail -1 | grep -o '"ACT":{"stored":[0-9]*' | cut -d: -f3)
    [ "$a" = "$b" ] || { same=0; echo "  $pol ACT: harness '$a', actc train '$b'"; }
    # the memory table a user reads says the same
    grep -q "context before backward: stored" "$TMP/direct.txt" || same=0
    [ $same = 1 ] && pass "$pol: the harness's bytes are actc train's" || fail "$pol: bytes differ from actc train"
    a=$(col "maxbatch,mlp,$pol,0" largest_batch_samples) p=$(col "maxbatch,mlp,$pol,0" allocator_peak_bytes)
    # at the resolution the harness used (its runs/ log starts with the command)
    res=$(head -1 "$OUT/runs/maxbatch_mlp_${pol/:/_}_0.txt" | grep -oE -- '--resolution [0-9]+')
    [ -n "$res" ] || fail "$pol: no --resolution in the harness's maxbatch log"
    d=$($ACTC maxbatch --budget 24MiB --model mlp --compress $pol $res --threads 1 --json | tail -1)
    if grep -q "\"largest\":$a," <<<"$d" && grep -q "\"peak\":$p," <<<"$d"; then pass "$pol: maxbatch $a as actc maxbatch"
    else fail "$pol: maxbatch harness $a (peak $p), actc maxbatch: $d"; fi
done
# Compression shows: gact:4 holds less context than none, and fits a larger batch.
a=$(col train,mlp,none,64 context_bytes) b=$(col train,mlp,gact:4,64 context_bytes)
[ "$b" -lt "$((a / 4))" ] && pass "gact:4 context $b < none's $a / 4" || fail "gact:4 context $b, none $a"
a=$(col maxbatch,mlp,none,0 largest_batch_samples) b=$(col maxbatch,mlp,gact:4,0 largest_batch_samples)
[ "$b" -gt "$a" ] && pass "gact:4 fits a larger batch ($b > $a)" || fail "maxbatch gact:4 $b, none $a"
# Peak RSS is the child's own (VmHWM, its memory table's), not the
# kernel's count for a child, which starts from the harness's at the fork.
log=$(ls "$OUT"/runs/train_mlp_gact_4_64.jsonl 2>/dev/null)
a=$(col train,mlp,gact:4,64 peak_rss_bytes) b=$([ -n "$log" ] && jnum "$log" peak_rss)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "peak RSS is the run's own ($a)" || fail "peak RSS: harness '$a', run's log '$b'"

# Plots: PNG and SVG images with axes; the report lists them.
for p in context_mlp memory_mlp throughput_mlp time_mlp maxbatch_mlp; do
    f=$OUT/plots/$p.png
    if [ "$(head -c 8 "$f" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
       [ "$(stat -c %s "$f")" -gt 5000 ] && grep -q "<svg" "$OUT/plots/$p.svg" && grep -q "plots/$p.png" "$OUT/report.md"; then
        pass "plot $p"
    else
        fail "plot $p: not a PNG/SVG pair of a real plot"
    fi
done
grep -A1 '"none: over' "$OUT/plots/throughput_mlp.dat" | grep -q "^4096 0" &&
    grep -q "samples per second" "$OUT/plots/plots.gp" && grep -q "batch (samples)" "$OUT/plots/plots.gp" &&
    pass "throughput plot: the OOM point at 4096 and labelled axes" || fail "throughput plot lacks OOM points or labels"

# Resume: rows removed (a suite killed before them) are run again, the others kept.
head -n 7 "$CSV" > "$TMP/cut.csv" && cp "$TMP/cut.csv" "$CSV"
run_suite > "$TMP/resume.txt" 2>&1
if grep -q "resuming: 6 of 9 rows" "$TMP/resume.txt" && [ $(($(wc -l < "$CSV") - 1)) -eq 9 ] &&
   [ "$(grep -c '^\[' "$TMP/resume.txt")" -eq 3 ]; then
    pass "resume runs only the 3 missing rows"
else
    fail "resume"; cat "$TMP/resume.txt"
fi

# No gnuplot: the suite still succeeds, with tables and a note.
if ACTC_GNUPLOT=/nonexistent/gnuplot run_suite > "$TMP/nogp.txt" 2>&1 && grep -q "no plots" "$TMP/nogp.txt" &&
   grep -q "No plots" "$OUT/report.md" && grep -q "| none |" "$OUT/report.md"; then
    pass "no gnuplot: tables and a note"
else
    fail "no gnuplot"; tail -5 "$TMP/nogp.txt"
fi
# --report-only: the report from the rows there, nothing run, the missing row
# noted; a row that is not applicable (compact's) is recorded, as it costs
# nothing.
head -n 8 "$CSV" > "$TMP/cut.csv" && cp "$TMP/cut.csv" "$CSV"
if run_suite --report-only > "$TMP/ro.txt" 2>&1 && ! grep -q '^\[' "$TMP/ro.txt" &&
   [ $(($(wc -l < "$CSV") - 1)) -eq 8 ] && grep -q "1 of the suite's 9 rows have not run yet" "$OUT/report.md" &&
   [ "$(col train,mlp,compact,0 status)" = n/a ] && [ -z "$(col maxbatch,mlp,gact:4,0 status)" ]; then
    pass "--report-only runs nothing, records the n/a row and notes the missing one"
else
    fail "--report-only"; cat "$TMP/ro.txt"
fi
# A damaged CSV: every field of a row is checked on read; a row that fails
# (an unknown status or kind, a number out of range or subnormal, a batch
# past int, a field longer than its column, here a note of 9,000 bytes in
# the middle) is dropped with a note naming its line, its configuration runs
# again, and the rows after it are kept.  The file is rewritten clean.
cp "$CSV" "$TMP/good.csv"
python3 - "$CSV" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h, data = rows[0], rows[1:]
c = {n: i for i, n in enumerate(h)}
for i, (col, v) in enumerate([("status", "bogus"), ("samples_per_s", "-1e308"), ("samples_per_s", "1e-320"),
                              ("batch_samples", "99999999999"), ("kind", "trian"), ("note", "x" * 9000)]):
    data[i][c[col]] = v
w = csv.writer(open(sys.argv[1], "w"), lineterminator="\n")
w.writerow(h)
w.writerows(data)
EOF
last=$(tail -1 "$CSV")
run_suite --report-only > "$TMP/dmg.txt" 2>&1
notes=$(grep -c "a damaged row" "$TMP/dmg.txt")
if [ "$notes" -eq 6 ] && grep -q "results.csv:2: a damaged row (status 'bogus' is none of ok, oom, failed, n/a)" "$TMP/dmg.txt" &&
   grep -q "results.csv:3: a damaged row (samples_per_s '-1e308' is not a number" "$TMP/dmg.txt" &&
   grep -q "results.csv:4: a damaged row (samples_per_s '1e-320'" "$TMP/dmg.txt" &&
   grep -q "results.csv:5: a damaged row (batch_samples '99999999999'" "$TMP/dmg.txt" &&
   grep -q "results.csv:6: a damaged row (unknown kind 'trian')" "$TMP/dmg.txt" &&
   grep -q "results.csv:7: a damaged row (note is longer than" "$TMP/dmg.txt" && grep -qxF -- "$last" "$CSV" &&
   run_suite --report-only > "$TMP/dmg2.txt" 2>&1 && ! grep -q "damaged" "$TMP/dmg2.txt"; then
    pass "damaged rows: each named and dropped, the rows after them kept, the file rewritten clean"
else
    fail "damaged rows ($notes notes)"; grep note "$TMP/dmg.txt" | cut -c1-150
fi
# Rows measured with other settings are never reused, even without suite.txt.
cp "$TMP/good.csv" "$CSV" && rm -f "$OUT/suite.txt"
sed -i '2,$s/actc=[^,]*/actc=0.0.1 suite=other budget=1 steps=9 threads=7/' "$CSV"
expect_fail "rows of other settings, suite.txt deleted" "results.csv:2: a row measured with other settings \(actc=0.0.1" \
    run_suite --report-only
# An empty results.csv is a suite with no rows yet.
: > "$CSV"
run_suite --report-only > "$TMP/empty.txt" 2>&1 && pass "an empty results.csv: no rows yet" || { fail "empty results.csv"; tail -3 "$TMP/empty.txt"; }
cp "$TMP/good.csv" "$CSV"

# The paper suite lists no longest-window search for GACT, whose sensitivity
# passes at batch 1 span the whole window (compact's codec part included),
# and says why.
if $ACTC bench --suite paper --models gpt --policies none,gact:4,compact:r=0.25+gact:2 --torch=0 --report-only \
       --out "$TMP/seq" > "$TMP/seq.txt" 2>&1 &&
   [ "$(col_of "$TMP/seq/results.csv" 'maxseq,gpt,gact:4,1' status)" = n/a ] &&
   [ "$(col_of "$TMP/seq/results.csv" 'maxseq,gpt,compact:r=0.25+gact:2,1' status)" = n/a ] &&
   [ -z "$(col_of "$TMP/seq/results.csv" 'maxseq,gpt,none,1' status)" ] &&
   grep -q "sensitivity passes" <<<"$(col_of "$TMP/seq/results.csv" 'maxseq,gpt,gact:4,1' note)"; then
    pass "paper suite: GACT's maxseq rows n/a with the reason"
else
    fail "paper suite: GACT's maxseq rows"; tail -3 "$TMP/seq.txt"
fi

# No python3-torch: a note, no PyTorch rows, no failure (resnet20 has a peer;
# --budget too small for it stops before the first run anyway, so use the
# check alone: a bogus interpreter; no budget, so no maxbatch row).
out=$(ACTC_PYTHON=/nonexistent/python3 $ACTC bench --models resnet20 --policies none --batches 2 --steps 1 --budget 0 \
      --threads 1 --out "$TMP/torch" 2>&1)
if [ $? -eq 0 ] && grep -q "/nonexistent/python3 cannot import torch" <<<"$out" &&
   grep -q "no PyTorch peer" "$TMP/torch/report.md" && ! grep -q "^pytorch" "$TMP/torch/results.csv"; then
    pass "no python3-torch: a note, no peer rows"
else
    fail "no python3-torch"; echo "$out" | tail -5
fi

# Bad input: refused before anything is written.
expect_fail "unknown model" "unknown model 'nope'" $ACTC bench --models mlp,nope --out "$TMP/bad"
expect_fail "unknown policy" "bad compression policy 'quant:9'" $ACTC bench --models mlp --policies none,quant:9 --out "$TMP/bad"
expect_fail "budget too small" "too small: not one policy trains mlp" $ACTC bench --models mlp --budget 1MiB --out "$TMP/bad"
expect_fail "graph model" "full-batch" $ACTC bench --models gcn --out "$TMP/bad"
expect_fail "bad batches" "--batches" $ACTC bench --models mlp --batches 8,x --out "$TMP/bad"
expect_fail "unknown suite" "--suite must be" $ACTC bench --suite huge
expect_fail "an empty item in --models" "--models 'mlp,,mlp': an empty item" $ACTC bench --models mlp,,mlp --out "$TMP/bad"
expect_fail "an empty item in --batches" "--batches '8,,8': an empty item" $ACTC bench --models mlp --batches 8,,8 --out "$TMP/bad"
expect_fail "a trailing comma in --policies" "--policies 'none,': an empty item" $ACTC bench --models mlp --policies none, --out "$TMP/bad"
expect_fail "--steps whose runs would overflow" "--steps 2147483647 at batch 32: the train runs would read" \
    $ACTC bench --models mlp --policies none --batches 32 --budget 0 --steps 2147483647 --out "$TMP/bad"
[ -e "$TMP/bad" ] && fail "a refused suite wrote $TMP/bad" || pass "refused suites wrote nothing"
touch "$TMP/afile"
expect_fail "unwritable output" "cannot write there" $ACTC bench --models mlp --policies none --out "$TMP/afile/out"
expect_fail "other settings" "other settings" $ACTC bench --models mlp --policies none --budget 32MiB --out "$OUT"
expect_fail "one suite at a time" "another actc bench is running there" \
    flock "$OUT/suite.txt" bash -c "$(declare -f run_suite); ACTC=$ACTC OUT=$OUT run_suite"

# A search that reaches its --limit (65,536 samples, which fit) is a lower
# bound: flagged in the CSV, ">=" in the report.
if $ACTC bench --models mlp --policies quant:2 --batches 32 --budget 2GiB --steps 1 --threads 1 --torch=0 \
       --out "$TMP/limit" > "$TMP/limit.txt" 2>&1 &&
   [ "$(col_of "$TMP/limit/results.csv" 'maxbatch,mlp,quant:2,0' search_at_limit)" = 1 ] &&
   [ "$(col_of "$CSV" 'maxbatch,mlp,none,0' search_at_limit)" = 0 ] &&
   grep -q '| mlp | quant:2 | >= 65536 |' "$TMP/limit/report.md" && grep -q "at least 65536" "$TMP/limit.txt"; then
    pass "a search at its limit: at least"
else
    fail "a search at its limit"; tail -3 "$TMP/limit.txt"
fi

# A policy's own commas (quant:4,group=64) stay in its spec.
if $ACTC bench --models mlp --policies none,quant:4,group=64 --batches 32 --budget 0 --threads 1 \
       --out "$TMP/commas" > "$TMP/commas.txt" 2>&1 &&
   [ "$(col_of "$TMP/commas/results.csv" 'train,mlp,quant:4,group=64,32' status)" = ok ]; then
    pass "--policies none,quant:4,group=64: two policies"
else
    fail "--policies with a policy's own commas"; tail -3 "$TMP/commas.txt"
fi
finish

# Shared by the shell tests (sourced, like tests/test_util.h for the C++ ones): the mpirun line,
# a temporary folder removed at exit, pass/fail counters and the checks several tests use.
# Usage: source "$(dirname "$0")/test_util.sh" MPIRUN_OR_EMPTY (pass "" rather than nothing: a bare
# `source` hands the script's own arguments to this file)
#   MPIRUN given: $MPIRUN becomes it with --oversubscribe --allow-run-as-root --bind-to none and
#   NCCL_NVLS_ENABLE=0 exported to the ranks.
if [ -n "${1:-}" ]; then
  MPIRUN="$1 --oversubscribe --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE=0"
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }

# expect_error NAME EXPECTED_SUBSTRING ARGS...: $BIN on ${NP:-2} ranks with $EXPECT_ARGS (default
# "--backend cpu") and ARGS exits with code 2 and prints EXPECTED_SUBSTRING.
expect_error() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 120 $MPIRUN -np "${NP:-2}" "$BIN" ${EXPECT_ARGS:---backend cpu} "$@" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out"; then ok "$name (exit 2: $(grep -F -- "$want" <<<"$out" | head -1 | cut -c1-150))"
  else bad "$name: rc=$rc, wanted exit 2 and '$want', got: $out"; fi
}

# is_png FILE: non-empty with the PNG signature.
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

# finish: the counts; exit status 0 only when nothing failed.
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

# Shared start of the A/B scripts (sourced after `cd` to the repo): builds revision
# REV's dataplane (or the package named by AB_PACKAGE) in a temporary worktree
# ($AB_OLD/target/release/) and this revision's dataplane and pktgen, and loads the
# e2e helpers. The worktree goes away
# at exit together with the e2e cleanup (one EXIT trap for both: lib.sh sets its own).
# Usage: ab_start REV
ab_start() {
  AB_OLD=$(mktemp -d /tmp/kvd-ab.XXXXXX)
  git worktree add -q "$AB_OLD/src" "$1"
  (cd "$AB_OLD/src" && CARGO_TARGET_DIR="$AB_OLD/target" cargo build --release -q -p "${AB_PACKAGE:-dataplane}")
  cargo build --release -q -p dataplane -p pktgen
  . scripts/e2e/lib.sh
  trap 'git worktree remove --force "$AB_OLD/src"; rm -rf "$AB_OLD"; e2e_cleanup' EXIT
}

# ab_use base|head: the dataplane binary the next start_dataplane runs (DP).
ab_use() {
  if [ "$1" = base ]; then DP="$AB_OLD/target/release/dataplane"; else DP=target/release/dataplane; fi
}

#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (cargo-fuzz) on the stable
# toolchain: every target, one after the other, for RUNS inputs each
# (default 10 million). Usage: scripts/fuzz.sh [TARGET...]
#   RUNS=N      inputs per target (libFuzzer -runs)
# New inputs go to target/fuzz-corpus/<target> (the seeds in fuzz/corpus
# stay as they are); a crash is written to target/fuzz-artifacts/<target>
# and stops the script. Each target's last libFuzzer lines go to
# target/fuzz-logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-10000000}"
HOST_TARGETS=(jsonrpc_frame ndjson_lines websocket_frames http_connection address map_send acp_bridge plugin_result)
PLUGIN_TARGETS=(mamp_message uap_decode)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

run() {
    local dir="$1" target="$2" root="$PWD"
    local corpus="$root/target/fuzz-corpus/$target" artifacts="$root/target/fuzz-artifacts/$target" log="$root/target/fuzz-logs/$target.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    echo "==> $target: $RUNS inputs"
    # `-s none`: sanitizers need a nightly compiler; libFuzzer's coverage instrumentation does not.
    (cd "$dir" && nice -n 19 cargo fuzz run -s none -O "$target" "$corpus" "$root/fuzz/corpus/$target" -- \
        -runs="$RUNS" -max_len=4096 -timeout=20 -artifact_prefix="$artifacts/" -print_final_stats=1) >"$log" 2>&1 || {
        tail -40 "$log"
        echo "$target failed: see $log and $artifacts" >&2
        exit 1
    }
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec)|^Done" "$log" | sed "s/^/    /"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${HOST_TARGETS[@]}" "${PLUGIN_TARGETS[@]}")
for t in "${targets[@]}"; do
    if [[ " ${PLUGIN_TARGETS[*]} " == *" $t "* ]]; then
        run plugins "$t"
    elif [[ " ${HOST_TARGETS[*]} " == *" $t "* ]]; then
        run . "$t"
    else
        echo "unknown target $t (targets: ${HOST_TARGETS[*]} ${PLUGIN_TARGETS[*]})" >&2
        exit 2
    fi
done

#!/usr/bin/env bash
# Builds everything (host, plugins, fixtures, the book in docs/) and runs
# every test: Rust unit and black-box tests, then the interop suite with the
# real MAP SDK client, which runs the README's and the book's code blocks too.
# Needs PostgreSQL on 127.0.0.1:5432 (database `test`) for the storage tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is printed with the time since the start and the CPU time its
# commands have used so far (user + system): where the time goes.
times_file="${TMPDIR:-/tmp}/map-gateway-test-times.$$"
cpu() { # `times` runs in this shell (a subshell's children are not these)
    times >"$times_file"
    awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); sub(/s/, "", t[2]); n += t[1] * 60 + t[2] } printf "%d", n }' "$times_file"
}
step() {
    cpu >"$times_file.n"
    printf '==> [%d:%02d, cpu %ss] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$(cat "$times_file.n")" "$*"
}
# A lane still running when a step fails is stopped with all it started.
stop_tree() { # PID
    local child
    for child in $(pgrep -P "$1"); do stop_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
trap 'for job in $(jobs -p); do stop_tree "$job"; done; step "test.sh ends"; rm -f "$times_file" "$times_file.n"' EXIT

step "setting up (scripts/setup.sh --tests)"
scripts/setup.sh --tests
# Every Rust crate of this repository is compiled by clippy's driver, warnings
# as errors: the lints ride on the build instead of a second one (`cargo
# clippy` checks every dependency again). Dependencies build with plain rustc.
export RUSTC_WORKSPACE_WRAPPER="$PWD/scripts/lint-rustc"
# Tools installed once per machine (setup.sh): mdbook.
export PATH="${XDG_CACHE_HOME:-$HOME/.cache}/map-gateway/tools/bin:$PATH"

step "building the book (docs/ into target/book)"
mkdir -p target
mdbook build docs 2>&1 | tee target/book.log
# mdbook logs an include whose file is missing and builds on: fail here instead.
if grep -q ERROR target/book.log; then
    echo "the book has errors (above)" >&2
    exit 1
fi

# Builds in two lanes, as the two use different target folders and a build
# leaves a core idle in its serial stretches (a plugin's link-time
# optimisation, the gateway's last crates and links): the Wasm components
# in the background, the gateway and every test binary in the foreground.
mkdir -p target/logs
background() { # NAME COMMAND...: runs it with its output in target/logs/NAME.log
    local name=$1
    shift
    step "$name: in the background (target/logs/$name.log)"
    ("$@") >"target/logs/$name.log" 2>&1 &
    eval "pid_$name=$!"
}
join() { # NAME: waits for it; on a failure prints its log and stops
    local name=$1 pid
    eval "pid=\$pid_$name"
    if ! wait "$pid"; then
        cat "target/logs/$name.log" >&2
        echo "test.sh: $name failed (its output is above)" >&2
        exit 1
    fi
    step "$name: done"
}
# Plugins made by `map-gateway plugin new` on the packaged SDKs, in Rust,
# Python and JavaScript (the interop suite's plugin-new.test.mjs loads them).
sdk_projects() {
    set -euo pipefail
    scripts/package-sdks.sh
    rm -rf target/scaffold/sdk-example target/scaffold/sdk-example-python target/scaffold/sdk-example-js
    target/debug/map-gateway plugin new sdk-example --sdk target/sdk-packages --dir target/scaffold/sdk-example
    (cd target/scaffold/sdk-example && CARGO_TARGET_DIR=.. cargo build --release --target wasm32-wasip2)
    target/debug/map-gateway plugin new sdk-example --lang python --sdk target/sdk-packages --dir target/scaffold/sdk-example-python
    target/scaffold/sdk-example-python/build.sh
    target/debug/map-gateway plugin new sdk-example --lang js --sdk target/sdk-packages --dir target/scaffold/sdk-example-js
    target/scaffold/sdk-example-js/build.sh
}

background plugins scripts/build-plugins.sh --fixtures

step "building the gateway (and its benchmarks, so they are linted)"
cargo build --locked -p map-gateway --bins --benches

background sdk_projects sdk_projects

step "building the tests: the host's crates, the gateway's black-box tests, the benchmark harness, the standard plugins"
cargo test --locked --workspace --no-run
(cd plugins && cargo test --locked --target-dir ../target/plugins-host --no-run)

join plugins
join sdk_projects

step "installing the two-agents and workspace-agent examples' npm packages"
(cd examples/two-agents && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
(cd examples/workspace-agent && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)

# The suites spend most of their time waiting on the gateways they start
# (each its own, on a free port, with its own databases and streams): the
# interop suite runs beside the Rust tests.
interop() {
    cd tests/interop
    GATEWAY_BIN="$PWD/../../target/debug/map-gateway" npm test
}
background interop interop

step "Rust tests: the host's crates, the gateway's black-box tests, the benchmark harness"
cargo test --locked --workspace -- --skip registry_scale::

step "Rust tests: standard plugins"
(cd plugins && cargo test --locked --target-dir ../target/plugins-host)

step "Python plugin SDK unit tests"
(cd plugins/sdk-python && python3 -B -m unittest discover -s tests -q)

step "JavaScript plugin SDK unit tests"
(cd plugins/sdk-js && npm test --silent)

step "interop suite (@multi-agent-protocol/sdk): waiting for it"
join interop
grep -E '^# (tests|pass|fail|cancelled|skipped|duration_ms) ' target/logs/interop.log

step "Rust tests that hold the gateway to latency bounds under a load of their own (100,000 agents), alone"
cargo test --locked -p map-gateway --test all -- --test-threads=1 registry_scale::

//! The fuzz targets' smoke pass, for the test command: a target over its
//! seed corpus (`fuzz/corpus/<target>`), its regression inputs
//! (`fuzz/regressions/<target>`, each a crash a fuzzer found), then over
//! inputs made by mutating the seeds, with a fixed seed so every run is the
//! same. A target panics when its decoder breaks its contract; a panic in a
//! task it spawned on its thread counts too. The long runs are `scripts/fuzz.sh`.

use std::cell::Cell;
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

thread_local! {
    /// A panic happened on this thread since the last input began.
    static PANICKED: Cell<bool> = const { Cell::new(false) };
}

fn watch_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.with(|p| p.set(true));
            default(info);
        }));
    });
}

/// Run one input; a panic anywhere on this thread fails it.
fn run(name: &str, target: fn(&[u8]), input: &[u8]) {
    PANICKED.with(|p| p.set(false));
    target(input);
    assert!(!PANICKED.with(Cell::get), "{name}: a task panicked on {:?}", String::from_utf8_lossy(input));
}

/// The files of `fuzz/<dir>/<name>`, in name order.
pub fn files(dir: &str, name: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz").join(dir).join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("a directory entry").path()).collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).expect("a readable file")).collect()
}

/// Bytes a fuzzer would splice in: JSON's structure and edge cases, line ends, bad UTF-8.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"null",
    b"true",
    b"0",
    b"-1",
    b"1e999",
    b"-0.0",
    b"18446744073709551616",
    b"\\u0000",
    b"\\ud800",
    b"\\",
    b"\n",
    b"\r\n",
    b"\xff",
    b"\xc3\xa9",
    br#""jsonrpc":"2.0""#,
    br#""id":"#,
    br#""method":"#,
    br#""params":"#,
    br#""to":"#,
    br#""agent":"#,
    br#""payload":"#,
    b"[[[[[[[[",
    b"{\"a\":{\"a\":",
    b"\x00\x00\x00\x00",
];

/// A seed with a few edits: a byte set, a byte dropped, a token inserted, a run repeated.
fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<prop::sample::Index>(), 0u8..4, any::<u8>(), prop::sample::select(TOKENS));
    (prop::sample::select(seeds), prop::collection::vec(edit, 0..6)).prop_map(|(mut s, edits)| {
        for (at, kind, byte, token) in edits {
            let i = at.index(s.len() + 1);
            match kind {
                0 if i < s.len() => s[i] = byte,
                1 if i < s.len() => {
                    s.remove(i);
                }
                2 => {
                    s.splice(i..i, token.iter().copied());
                }
                _ => {
                    let end = (i + byte as usize % 16).min(s.len());
                    let repeated = s[i.min(end)..end].to_vec();
                    s.splice(end..end, repeated);
                }
            }
        }
        s
    })
}

/// Run `target` over its corpus and regressions, then over `cases` mutated seeds.
pub fn smoke(name: &str, target: fn(&[u8]), cases: u32) {
    watch_panics();
    let seeds = files("corpus", name);
    assert!(!seeds.is_empty(), "{name} has no seed corpus");
    for input in seeds.iter().chain(&files("regressions", name)) {
        run(name, target, input);
    }
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    TestRunner::new_with_rng(config, rng)
        .run(&mutated(seeds), |input| {
            run(name, target, &input);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

//! One single-threaded Tokio runtime per thread for the targets that need
//! one: made once, since a fuzzer calls a target millions of times.

use std::future::Future;

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a Tokio runtime");
}

/// Run `f` to completion on this thread's runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    RUNTIME.with(|rt| rt.block_on(f))
}

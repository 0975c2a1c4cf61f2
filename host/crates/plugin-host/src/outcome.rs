//! How a call into a plugin ended, decided where it ends: counted by
//! `stats`, and the `outcome` label of the metrics and the call's span.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answered within the contract.
    Ok,
    /// Answered, but broke the contract (malformed or oversized, a code outside its range).
    Error,
    /// Trapped, or was called for an export it does not have.
    Trapped,
    /// Ran past its deadline.
    TimedOut,
    /// Asked for more linear memory than `memory_mb` allows.
    OutOfMemory,
    /// No instance could take the call in time.
    Busy,
    /// A fresh instance for the call failed to start.
    StartFailed,
}

impl CallOutcome {
    /// Every outcome, in the order of the declaration.
    pub const ALL: [CallOutcome; 7] = [
        CallOutcome::Ok,
        CallOutcome::Error,
        CallOutcome::Trapped,
        CallOutcome::TimedOut,
        CallOutcome::OutOfMemory,
        CallOutcome::Busy,
        CallOutcome::StartFailed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Error => "error",
            CallOutcome::Trapped => "trap",
            CallOutcome::TimedOut => "timeout",
            CallOutcome::OutOfMemory => "out_of_memory",
            CallOutcome::Busy => "busy",
            CallOutcome::StartFailed => "failed",
        }
    }
}

/// A call that failed: how, and why (for the caller's error and the log).
#[derive(Debug)]
pub struct Failure {
    pub outcome: CallOutcome,
    pub reason: String,
}

impl Failure {
    pub fn new(outcome: CallOutcome, reason: impl Into<String>) -> Failure {
        Failure { outcome, reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_listed_once_in_declaration_order() {
        for (i, o) in CallOutcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i, "{o:?}");
        }
    }
}

//! Event type patterns: `_` and `.` are one separator, the SDK's aliases
//! name core types, and a selected type is spelled as its pattern names it.

use std::borrow::Cow;

/// One byte of a normalised event type: `agent_registered` and
/// `agent.registered` are one type.
fn norm(b: u8) -> u8 {
    if b == b'_' {
        b'.'
    } else {
        b
    }
}

/// Whether two event types are equal once normalised (no allocation: this runs per event and subscription).
fn same_type(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| norm(*x) == norm(*y))
}

/// The SDK's names for core event types that differ by more than the
/// separator (`agent.registered` already equals `agent_registered`).
const ALIASES: &[(&[u8], &[u8])] =
    &[(b"session.connected", b"participant_connected"), (b"session.disconnected", b"participant_disconnected"), (b"session.*", b"participant.*")];

/// The core type a filter pattern stands for (an alias resolved).
fn unalias(pattern: &[u8]) -> &[u8] {
    ALIASES.iter().find(|(alias, _)| same_type(alias, pattern)).map_or(pattern, |(_, core)| *core)
}

/// A filter's type pattern (`*`, `prefix.*` or a type) against an event type; `_` and `.` are one separator.
pub(super) fn type_matches(pattern: &[u8], kind: &[u8]) -> bool {
    let pattern = unalias(pattern);
    match pattern.strip_suffix(b".*").or_else(|| pattern.strip_suffix(b"_*")) {
        Some(prefix) => kind.len() > prefix.len() && same_type(prefix, &kind[..prefix.len()]) && norm(kind[prefix.len()]) == b'.',
        None => pattern == b"*" || same_type(pattern, kind),
    }
}

/// An event type as the pattern that selected it spells it: a named type
/// as the pattern names it; under `prefix.*` or `prefix_*`, the pattern's
/// prefix and the rest of the type with that separator; under `*`, as emitted.
pub(super) fn spelled_as<'a>(pattern: &'a str, kind: &'a str) -> Cow<'a, str> {
    let Some(prefix) = pattern.strip_suffix('*').filter(|p| !p.is_empty()) else {
        return Cow::Borrowed(if pattern == "*" { kind } else { pattern });
    };
    // Both end with their separator: `session.` against `participant_`.
    let core_len = unalias(pattern.as_bytes()).len() - 1;
    let sep = if prefix.ends_with('_') { '_' } else { '.' };
    let rest = kind.get(core_len..).unwrap_or_default();
    let mut s = String::with_capacity(prefix.len() + rest.len());
    s.push_str(prefix);
    s.extend(rest.chars().map(|c| if c == '.' || c == '_' { sep } else { c }));
    Cow::Owned(s)
}

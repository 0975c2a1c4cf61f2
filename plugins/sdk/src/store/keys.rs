//! Keys whose byte order is the order wanted. The store orders keys of a
//! collection byte-wise, so a secondary index is a collection of its own
//! with keys `<part>/<part>/…` and a range is a key prefix.
//!
//! - [`escape`] makes an id that may hold `/` (or `%`) safe as one part, so
//!   no id can forge a separator and the prefix `<id>/` holds only that id's keys;
//! - [`number`] writes an unsigned number in fixed width, so byte order is
//!   numeric order;
//! - [`join`] and [`prefix`] put parts together.

/// An id made safe as one key part: `%` becomes `%25` and `/` becomes `%2F`.
pub fn escape(part: &str) -> String {
    part.replace('%', "%25").replace('/', "%2F")
}

/// The inverse of [`escape`].
pub fn unescape(part: &str) -> String {
    part.replace("%2F", "/").replace("%25", "%")
}

/// Parts joined by `/` (already escaped where needed).
pub fn join<S: AsRef<str>>(parts: &[S]) -> String {
    let mut key = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            key.push('/');
        }
        key.push_str(p.as_ref());
    }
    key
}

/// The prefix of every key under these parts: `join(parts) + "/"`.
pub fn prefix<S: AsRef<str>>(parts: &[S]) -> String {
    let mut p = join(parts);
    p.push('/');
    p
}

/// `n` as 20 decimal digits, zero-padded: byte order is numeric order.
pub fn number(n: u64) -> String {
    format!("{n:020}")
}

/// The inverse of [`number`].
pub fn parse_number(part: &str) -> Option<u64> {
    part.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_parts_cannot_forge_separators() {
        let a = prefix(&[escape("a")]);
        let ab = prefix(&[escape("a/b")]);
        assert_eq!(ab, "a%2Fb/");
        assert!(!ab.starts_with(&a) && !a.starts_with(&ab));
        assert_eq!(unescape(&escape("50%/x%2F")), "50%/x%2F");
    }

    #[test]
    fn numbers_sort_numerically() {
        let mut ns = [0u64, 9, 10, 100, 99, u64::MAX, 1];
        let mut keys: Vec<String> = ns.iter().map(|n| number(*n)).collect();
        keys.sort();
        ns.sort();
        assert_eq!(keys.iter().map(|k| parse_number(k).unwrap()).collect::<Vec<_>>(), ns);
    }

    #[test]
    fn join_and_prefix() {
        assert_eq!(join(&["conv", "turn"]), "conv/turn");
        assert_eq!(prefix(&["conv"]), "conv/");
        assert!(join(&["conv", "turn"]).starts_with(&prefix(&["conv"])));
        assert_eq!(join::<&str>(&[]), "");
    }
}

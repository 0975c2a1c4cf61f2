//! The MAP extension registry, as far as the gateway enforces it.
//!
//! A `urn:map:ext:<name>:<major>` URI names a registered extension, which
//! owns its error range (1000 codes) and, for some, a `map/` method
//! namespace. Experimental extensions take an `x-` name, a URI outside
//! `urn:map:ext:` and error codes from 90000 up; others outside the
//! registry load with a warning. The ranges of different extensions never
//! overlap. Extensions are checked against this when a plugin loads
//! ([`check`]) and against each other ([`collide`]).

/// A registered extension.
#[derive(Debug)]
pub struct Registered {
    /// The `<name>` of its URI, which is also its capability group.
    pub name: &'static str,
    /// The `map/` namespace a plugin may serve for it (federation's,
    /// sessions' and resources' are the core's own: a plugin provides
    /// resource types through its `resources` export instead).
    pub map_namespace: Option<&'static str>,
    /// Its error range, inclusive.
    pub errors: Option<(i64, i64)>,
}

const fn ext(name: &'static str, map_namespace: Option<&'static str>, errors: Option<(i64, i64)>) -> Registered {
    Registered { name, map_namespace, errors }
}

/// The registry's entries.
pub const REGISTRY: &[Registered] = &[
    ext("federation", None, Some((5000, 5999))),
    ext("mail", None, Some((10000, 10999))),
    ext("credentials", None, Some((11000, 11999))),
    ext("workspace", None, Some((12000, 12999))),
    ext("trajectory", None, Some((13000, 13999))),
    ext("tasks", Some("map/tasks/"), Some((14000, 14999))),
    ext("resources", None, Some((15000, 15999))),
    ext("sessions", None, Some((16000, 16999))),
    ext("acp-tunnel", None, None),
    ext("identity", None, None),
    ext("steering", None, None),
];

/// Where registered URIs live.
pub const URN_PREFIX: &str = "urn:map:ext:";
/// Experimental extensions take error codes from here up. The standard
/// plugins hold x-uap 91000–91999, x-mamp 92000–92999 and x-a2a 93000–93999.
pub const EXPERIMENTAL_ERRORS_FROM: i64 = 90000;
/// An extension's error range lies within one block of this many codes.
const BLOCK: i64 = 1000;

/// What an extension declares about itself.
#[derive(Debug, Clone, Copy)]
pub struct Declared<'a> {
    pub name: &'a str,
    pub uri: &'a str,
    pub capability_group: &'a str,
    pub methods: &'a [String],
    pub errors: (i64, i64),
}

/// The registered extension a `urn:map:ext:` URI names (`Ok(None)`: a
/// well-formed URI the registry does not list); `Err` for a malformed one.
fn registered_by_uri(uri: &str) -> Result<Option<&'static Registered>, String> {
    let Some(tail) = uri.strip_prefix(URN_PREFIX) else { return Ok(None) };
    let (name, major) = tail.rsplit_once(':').unwrap_or((tail, ""));
    let kebab = !name.is_empty() && name.split('-').all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    if !kebab || major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("URI {uri:?} is not of the form {URN_PREFIX}<kebab-case name>:<major version>"));
    }
    Ok(REGISTRY.iter().find(|r| r.name == name))
}

/// The `map/` namespace plugins may serve a method in, if any (`map/tasks/`).
pub fn plugin_namespace(method: &str) -> Option<&'static str> {
    REGISTRY.iter().filter_map(|r| r.map_namespace).find(|ns| method.starts_with(ns))
}

fn overlaps((a, b): (i64, i64), (c, d): (i64, i64)) -> bool {
    a <= d && c <= b
}

/// Check a declaration against the registry. `Ok(Some(note))` loads with a
/// warning: an extension the registry does not list that does not take the
/// experimental form either (its own URN with codes below 90000, say).
pub fn check(d: &Declared) -> Result<Option<String>, String> {
    let (lo, hi) = d.errors;
    if lo.div_euclid(BLOCK) != hi.div_euclid(BLOCK) {
        return Err(format!("error range {lo}..={hi} spans more than one block of {BLOCK} codes (N000..=N999)"));
    }
    let urn = d.uri.starts_with(URN_PREFIX);
    let entry = registered_by_uri(d.uri)?;
    if !urn && (d.uri.trim().is_empty() || d.uri.chars().any(char::is_whitespace)) {
        return Err(format!("URI {:?} is empty or holds whitespace", d.uri));
    }
    let experimental = d.name.starts_with("x-") || d.uri.strip_prefix(URN_PREFIX).is_some_and(|t| t.starts_with("x-"));
    if experimental && urn {
        return Err(format!("{:?} with URI {:?}: an experimental (x-) extension never takes a {URN_PREFIX} URI", d.name, d.uri));
    }
    if experimental && lo < EXPERIMENTAL_ERRORS_FROM {
        return Err(format!("{:?} is experimental (x-): its error codes must be {EXPERIMENTAL_ERRORS_FROM} or above, not {lo}..={hi}", d.name));
    }
    // Registered ranges and capability groups belong to their extensions.
    for r in REGISTRY.iter().filter(|r| entry.is_none_or(|e| e.name != r.name)) {
        if let Some(range) = r.errors.filter(|&range| overlaps(range, d.errors)) {
            return Err(format!("error range {lo}..={hi} overlaps {}..={} of the registered extension {URN_PREFIX}{}:1", range.0, range.1, r.name));
        }
        if d.capability_group == r.name {
            return Err(format!("the capability group {:?} belongs to the registered extension {URN_PREFIX}{}:1", r.name, r.name));
        }
    }
    if let Some((e, range)) = entry.and_then(|e| Some((e, e.errors?))).filter(|(_, range)| !(range.0 <= lo && hi <= range.1)) {
        return Err(format!("error range {lo}..={hi} lies outside {}..={} registered for {URN_PREFIX}{}", range.0, range.1, e.name));
    }
    let namespace = entry.and_then(|e| e.map_namespace);
    if let Some(bad) = d.methods.iter().find(|m| m.is_empty() || (m.starts_with("map/") && !namespace.is_some_and(|ns| m.starts_with(ns)))) {
        return Err(match namespace {
            Some(ns) => format!("may not serve {bad:?}: of map/, it may serve {ns} only"),
            None => format!("may not serve {bad:?}: map/ belongs to the core, but for the namespaces of registered extensions"),
        });
    }
    Ok((entry.is_none() && !experimental).then(|| {
        format!(
            "{:?} ({:?}) is not in the MAP extension registry: an extension outside it should take an x- name, a URI outside {URN_PREFIX} and error codes from {EXPERIMENTAL_ERRORS_FROM} up",
            d.uri, d.name
        )
    }))
}

/// Check the version of the protocol an extension says it implements: a
/// release number `<major>.<minor>[.<patch>]` whose major is its URI's, when
/// the URI ends in `:<major>` (`1.1.0` for `urn:map:ext:mail:1`).
pub fn check_protocol_version(uri: &str, version: &str) -> Result<(), String> {
    let parts: Vec<&str> = version.split('.').collect();
    // Protocols version as major.minor (A2A's "1.0") or major.minor.patch (mail's "1.1.0").
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("protocol version {version:?} is not of the form <major>.<minor>[.<patch>]"));
    }
    let uri_major = uri.rsplit_once(':').map(|(_, major)| major).filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
    match uri_major {
        Some(major) if major.parse::<u64>().ok() != parts[0].parse::<u64>().ok() => {
            Err(format!("protocol version {version} is not of the major version {major} that the URI {uri:?} names"))
        }
        _ => Ok(()),
    }
}

/// Why two extensions cannot be loaded together: their error ranges
/// overlap. Declarations of one URI are one extension (two versions, or
/// one component loaded twice) and may share codes.
pub fn collide(a: &Declared, b: &Declared) -> Option<String> {
    (a.uri != b.uri && overlaps(a.errors, b.errors)).then(|| {
        format!(
            "the error ranges of {} ({}..={}) and {} ({}..={}) overlap: the ranges of different extensions must be disjoint",
            a.uri, a.errors.0, a.errors.1, b.uri, b.errors.0, b.errors.1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared<'a>(name: &'a str, uri: &'a str, group: &'a str, methods: &'a [String], errors: (i64, i64)) -> Declared<'a> {
        Declared { name, uri, capability_group: group, methods, errors }
    }

    fn m(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn registered_extensions_keep_their_ranges_and_namespaces() {
        let tasks = m(&["map/tasks/create", "map/tasks/list"]);
        assert_eq!(check(&declared("tasks", "urn:map:ext:tasks:1", "tasks", &tasks, (14000, 14999))), Ok(None));
        assert_eq!(check(&declared("mail", "urn:map:ext:mail:1", "mail", &m(&["mail/create"]), (10000, 10999))), Ok(None));
        let e = check(&declared("tasks", "urn:map:ext:tasks:1", "tasks", &tasks, (20000, 20999))).unwrap_err();
        assert!(e.contains("outside 14000..=14999"), "{e}");
        let e = check(&declared("mail", "urn:map:ext:mail:1", "mail", &m(&["map/tasks/create"]), (10000, 10999))).unwrap_err();
        assert!(e.contains("map/ belongs to the core"), "{e}");
        let e = check(&declared("tasks", "urn:map:ext:tasks:1", "tasks", &m(&["map/agents/list"]), (14000, 14999))).unwrap_err();
        assert!(e.contains("map/tasks/ only"), "{e}");
    }

    #[test]
    fn experimental_extensions_take_x_names_and_codes_from_90000() {
        let uap = m(&["uap/submit"]);
        assert_eq!(check(&declared("x-uap", "x-uap:1", "x-uap", &uap, (91000, 91999))), Ok(None));
        let e = check(&declared("x-uap", "x-uap:1", "x-uap", &uap, (14000, 14999))).unwrap_err();
        assert!(e.contains("90000 or above"), "{e}");
        let e = check(&declared("x-uap", "x-uap:1", "x-uap", &uap, (20000, 20999))).unwrap_err();
        assert!(e.contains("90000 or above"), "{e}");
        let e = check(&declared("x-uap", "urn:map:ext:x-uap:1", "x-uap", &uap, (91000, 91999))).unwrap_err();
        assert!(e.contains("never takes a urn:map:ext: URI"), "{e}");
        let e = check(&declared("x-uap", "x-uap:1", "x-uap", &uap, (91000, 92999))).unwrap_err();
        assert!(e.contains("more than one block"), "{e}");
        let e = check(&declared("x-uap", "x-uap:1", "x-uap", &m(&["map/tasks/create"]), (91000, 91999))).unwrap_err();
        assert!(e.contains("map/ belongs to the core"), "{e}");
    }

    #[test]
    fn unregistered_extensions_load_with_a_note_unless_they_take_what_is_registered() {
        let echo = m(&["echo/call"]);
        let note = check(&declared("echo", "urn:map:ext:echo:1", "echo", &echo, (20000, 20099))).unwrap().unwrap();
        assert!(note.contains("not in the MAP extension registry"), "{note}");
        let note = check(&declared("notes", "urn:example:notes:1", "notes", &echo, (21000, 21099))).unwrap().unwrap();
        assert!(note.contains("should take an x- name"), "{note}");
        let e = check(&declared("echo", "urn:map:ext:echo:1", "echo", &echo, (14000, 14099))).unwrap_err();
        assert!(e.contains("registered extension urn:map:ext:tasks:1"), "{e}");
        let e = check(&declared("uap", "x-uap:1", "uap", &echo, (15000, 15999))).unwrap_err();
        assert!(e.contains("registered extension urn:map:ext:resources:1"), "{e}");
        let e = check(&declared("echo", "urn:map:ext:echo:1", "tasks", &echo, (20000, 20099))).unwrap_err();
        assert!(e.contains("capability group \"tasks\""), "{e}");
        for bad in ["urn:map:ext:Echo:1", "urn:map:ext:echo", "urn:map:ext:echo:v1", "urn:map:ext::1", "urn:map:ext:a--b:1"] {
            assert!(check(&declared("echo", bad, "echo", &echo, (20000, 20099))).unwrap_err().contains("is not of the form"), "{bad}");
        }
        assert!(check(&declared("x-a", "", "x-a", &echo, (90000, 90099))).unwrap_err().contains("empty"));
    }

    #[test]
    fn a_protocol_version_is_a_release_of_the_uris_major() {
        assert_eq!(check_protocol_version("urn:map:ext:mail:1", "1.1.0"), Ok(()));
        assert_eq!(check_protocol_version("x-uap:1", "1.0.12"), Ok(()));
        assert_eq!(check_protocol_version("urn:example:notes", "0.3.0"), Ok(()), "a URI without a major holds any");
        let e = check_protocol_version("urn:map:ext:mail:1", "2.0.0").unwrap_err();
        assert!(e.contains("major version 1"), "{e}");
        assert_eq!(check_protocol_version("urn:map:ext:a2a:1", "1.0"), Ok(()), "A2A versions as major.minor");
        for bad in ["1", "1.1.0.2", "1.1.0-rc1", "v1.1.0", "", "1..0"] {
            assert!(check_protocol_version("urn:map:ext:mail:1", bad).unwrap_err().contains("is not of the form"), "{bad}");
        }
    }

    #[test]
    fn ranges_of_different_extensions_must_not_overlap() {
        let none = Vec::new();
        let uap = declared("x-uap", "x-uap:1", "x-uap", &none, (91000, 91999));
        let other = declared("x-other", "x-other:1", "x-other", &none, (91500, 91599));
        let mamp = declared("x-mamp", "x-mamp:1", "x-mamp", &none, (92000, 92999));
        assert!(collide(&uap, &other).unwrap().contains("must be disjoint"));
        assert_eq!(collide(&uap, &mamp), None);
        // The standard experimental plugins each keep a block of their own.
        let a2a = declared("x-a2a", "x-a2a:1", "x-a2a", &none, (93000, 93999));
        assert_eq!(check(&a2a), Ok(None));
        assert_eq!((collide(&a2a, &uap), collide(&a2a, &mamp)), (None, None));
        let squatter = declared("x-squat", "x-squat:1", "x-squat", &none, (93500, 93599));
        assert!(collide(&a2a, &squatter).unwrap().contains("must be disjoint"));
        assert_eq!(collide(&uap, &uap), None, "one extension loaded twice");
        assert_eq!(plugin_namespace("map/tasks/create"), Some("map/tasks/"));
        assert_eq!(plugin_namespace("map/agents/list"), None);
        assert_eq!(plugin_namespace("map/federation/route"), None, "the core's");
        assert_eq!(plugin_namespace("map/resources/list"), None, "the core's too");
    }
}

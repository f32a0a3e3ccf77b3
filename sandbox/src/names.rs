//! Object names: the DNS-1123 rules the API server checks on `metadata.name`, and the rules for
//! label keys and values. (The five-character `generateName` suffix comes from `random.rs`.)
//!
//! Part of WORKSHOP.md "Set-up: the sandbox". Messages are worded exactly like
//! apimachinery's `validation.IsDNS1123Subdomain` / `IsDNS1123Label`, so a learner who meets them
//! here recognises them on a real cluster.

/// Most objects (and CRD names) must be DNS-1123 subdomains, at most this long.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Namespaces and services must be DNS-1123 labels, at most this long.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FORMAT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FORMAT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
const QUALIFIED_NAME_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FORMAT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Checks a name against DNS-1123 subdomain rules (≤253 characters, lowercase alphanumerics,
/// '-' and '.', starting and ending alphanumeric, each dot-separated part a label).
/// The error holds every problem, joined by ", " (the API server reports each as a cause).
pub fn validate_dns1123_subdomain(name: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    if name.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        problems.push(max_length_message(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !is_dns1123_subdomain_shape(name) {
        problems.push(regex_message(
            DNS1123_SUBDOMAIN_MESSAGE,
            DNS1123_SUBDOMAIN_FORMAT,
            &["example.com"],
        ));
    }
    into_result(problems)
}

/// Checks a name against DNS-1123 label rules (≤63 characters, lowercase alphanumerics and
/// '-', starting and ending alphanumeric, no dots).
pub fn validate_dns1123_label(name: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    if name.len() > DNS1123_LABEL_MAX_LENGTH {
        problems.push(max_length_message(DNS1123_LABEL_MAX_LENGTH));
    }
    if !is_dns1123_label_shape(name) {
        if is_dns1123_subdomain_shape(name) {
            // A valid subdomain that is not a valid label can only be wrong by its dots.
            problems.push("must not contain dots".to_string());
        } else {
            problems.push(regex_message(
                DNS1123_LABEL_MESSAGE,
                DNS1123_LABEL_FORMAT,
                &["my-name", "123-abc"],
            ));
        }
    }
    into_result(problems)
}

/// Checks a label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric
/// (`app.kubernetes.io/name`, `tier`). apimachinery calls this a "qualified name".
pub fn validate_qualified_name(key: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else if let Err(prefix_problems) = validate_dns1123_subdomain(prefix) {
                problems.push(format!("prefix part {prefix_problems}"));
            }
            *name
        }
        _ => {
            return Err(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_message(QUALIFIED_NAME_MESSAGE, QUALIFIED_NAME_FORMAT, &["MyName", "my.name", "123-abc"])
            ))
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        problems.push(format!(
            "name part {}",
            max_length_message(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !is_qualified_name_shape(name) {
        problems.push(format!(
            "name part {}",
            regex_message(
                QUALIFIED_NAME_MESSAGE,
                QUALIFIED_NAME_FORMAT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    into_result(problems)
}

/// Checks a label value: empty, or at most 63 alphanumerics, '-', '_' or '.', starting and
/// ending alphanumeric.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    if value.len() > QUALIFIED_NAME_MAX_LENGTH {
        problems.push(max_length_message(QUALIFIED_NAME_MAX_LENGTH));
    }
    if !value.is_empty() && !is_qualified_name_shape(value) {
        problems.push(regex_message(
            LABEL_VALUE_MESSAGE,
            LABEL_VALUE_FORMAT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    into_result(problems)
}

fn is_label_char(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit()
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn is_dns1123_label_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            is_label_char(first)
                && is_label_char(last)
                && bytes.iter().all(|&b| is_label_char(b) || b == b'-')
        }
        _ => false,
    }
}

/// Labels joined by single dots.
fn is_dns1123_subdomain_shape(text: &str) -> bool {
    text.split('.').all(is_dns1123_label_shape)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (any length; callers check that).
fn is_qualified_name_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn max_length_message(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// apimachinery's `RegexError`: the rule, examples, and the regex itself. Upstream writes each
/// example as `'x', ` and joins them with ` or `, hence the double space in
/// `(e.g. 'my-name',  or '123-abc', regex used ...)`; we keep it so messages match exactly.
fn regex_message(message: &str, format: &str, examples: &[&str]) -> String {
    let mut text = format!("{message} (e.g. ");
    for (index, example) in examples.iter().enumerate() {
        if index > 0 {
            text.push_str(" or ");
        }
        text.push_str(&format!("'{example}', "));
    }
    text.push_str(&format!("regex used for validation is '{format}')"));
    text
}

fn into_result(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ordinary names pass both checks; dotted names pass only as subdomains.
    #[test]
    fn accepts_valid_names() {
        for name in ["a", "db1", "my-cluster", "0abc", "a-b-c9"] {
            assert_eq!(validate_dns1123_label(name), Ok(()), "{name}");
            assert_eq!(validate_dns1123_subdomain(name), Ok(()), "{name}");
        }
        assert_eq!(
            validate_dns1123_subdomain("postgresclusters.workshop.example.com"),
            Ok(())
        );
        assert_eq!(
            validate_dns1123_label("a.b"),
            Err("must not contain dots".to_string())
        );
    }

    /// The subdomain message is word for word what the API server returns.
    #[test]
    fn subdomain_message_matches_kubernetes() {
        let error = validate_dns1123_subdomain("My_DB").unwrap_err();
        assert_eq!(
            error,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
    }

    /// The label message lists both examples, joined by "or".
    #[test]
    fn label_message_matches_kubernetes() {
        let error = validate_dns1123_label("-db").unwrap_err();
        assert_eq!(
            error,
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
    }

    /// Edge shapes: empty, leading/trailing '-' or '.', double dots, uppercase, non-ASCII.
    #[test]
    fn rejects_bad_shapes() {
        for name in [
            "", "-a", "a-", ".a", "a.", "a..b", "A", "a_b", "a b", "é", "a.-b",
        ] {
            assert!(validate_dns1123_subdomain(name).is_err(), "{name:?}");
            assert!(validate_dns1123_label(name).is_err(), "{name:?}");
        }
    }

    /// Length limits are 63 for labels and 253 for subdomains, and both errors are reported.
    #[test]
    fn length_limits() {
        let label63 = "a".repeat(63);
        assert_eq!(validate_dns1123_label(&label63), Ok(()));
        assert_eq!(
            validate_dns1123_label(&"a".repeat(64)),
            Err("must be no more than 63 characters".to_string())
        );
        let subdomain253 = format!("{label63}.{label63}.{label63}.{}", "a".repeat(61));
        assert_eq!(subdomain253.len(), 253);
        assert_eq!(validate_dns1123_subdomain(&subdomain253), Ok(()));
        let too_long_and_bad = format!("{subdomain253}-");
        let error = validate_dns1123_subdomain(&too_long_and_bad).unwrap_err();
        assert!(error.starts_with("must be no more than 253 characters, a lowercase RFC 1123"));
    }

    /// Label keys: prefixes must be subdomains, names qualified names, with upstream's wording.
    #[test]
    fn qualified_names() {
        for key in [
            "tier",
            "app.kubernetes.io/name",
            "A_b.c-9",
            "example.com/MyName",
        ] {
            assert_eq!(validate_qualified_name(key), Ok(()), "{key}");
        }
        assert_eq!(
            validate_qualified_name("/x"),
            Err("prefix part must be non-empty".to_string())
        );
        assert!(validate_qualified_name("Bad/x")
            .unwrap_err()
            .starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert_eq!(
            validate_qualified_name("-x"),
            Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string())
        );
        assert!(validate_qualified_name("a/b/c").unwrap_err().ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
        assert!(validate_qualified_name(&"k".repeat(64))
            .unwrap_err()
            .starts_with("name part must be no more than 63 characters"));
        assert!(validate_qualified_name("")
            .unwrap_err()
            .starts_with("name part must be non-empty, name part must consist"));
    }

    /// Label values may be empty; otherwise the same shape as a name part.
    #[test]
    fn label_values() {
        for value in ["", "db", "My_Value.1", &"v".repeat(63)] {
            assert_eq!(validate_label_value(value), Ok(()), "{value}");
        }
        assert_eq!(
            validate_label_value("-db"),
            Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string())
        );
        assert_eq!(
            validate_label_value(&"v".repeat(64)),
            Err("must be no more than 63 characters".to_string())
        );
    }
}

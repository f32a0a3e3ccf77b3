//! Label and field selectors: the `?labelSelector=` and `?fieldSelector=` query parameters
//! that filter lists and watches.
//!
//! Part of WORKSHOP.md "Set-up: the sandbox". kubectl sends `-l tier=db` as a label
//! selector, and `get pgc db1 -w`, `delete` and `describe` send field selectors such as
//! `metadata.name=db1` or `involvedObject.name=db1,involvedObject.kind=PostgresCluster`.
//! The grammar follows apimachinery's `labels.Parse` and `fields.ParseSelector`; decoding the
//! URL's percent-escapes is the caller's job.

use std::fmt;

use serde_json::{Map, Value};

/// A selector could not be parsed. Names the whole selector and the term that broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorError {
    /// A `labelSelector` term is malformed or uses an invalid key or value.
    LabelTerm {
        selector: String,
        term: String,
        problem: String,
    },
    /// A `fieldSelector` term has no operator or a bad escape.
    FieldTerm {
        selector: String,
        term: String,
        problem: String,
    },
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorError::LabelTerm {
                selector,
                term,
                problem,
            } => write!(
                f,
                "invalid label selector {selector:?}: term {term:?}: {problem}"
            ),
            SelectorError::FieldTerm {
                selector,
                term,
                problem,
            } => write!(
                f,
                "invalid field selector {selector:?}: term {term:?}: {problem}"
            ),
        }
    }
}

impl std::error::Error for SelectorError {}

/// How one label requirement compares the label's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelOperator {
    /// `key=value` or `key==value`: the label exists and equals the value.
    Equals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label exists and is one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or none of the values.
    NotIn,
    /// `key`: the label exists, any value.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>5`: the label exists and is an integer greater than the value.
    GreaterThan,
    /// `key<5`: the label exists and is an integer less than the value.
    LessThan,
}

/// One comma-separated term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelOperator,
    /// One value for Equals/NotEquals/GreaterThan/LessThan, the set for In/NotIn, none otherwise.
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// Whether a label's value (None: the object has no such label) satisfies this requirement.
    fn matches_value(&self, value: Option<&str>) -> bool {
        match (&self.operator, value) {
            (LabelOperator::Equals, Some(v)) | (LabelOperator::In, Some(v)) => {
                self.values.iter().any(|wanted| wanted == v)
            }
            (LabelOperator::Equals | LabelOperator::In, None) => false,
            // Absent labels satisfy the negative operators: `tier!=db` selects unlabelled objects.
            (LabelOperator::NotEquals | LabelOperator::NotIn, Some(v)) => {
                !self.values.iter().any(|unwanted| unwanted == v)
            }
            (LabelOperator::NotEquals | LabelOperator::NotIn, None) => true,
            (LabelOperator::Exists, found) => found.is_some(),
            (LabelOperator::DoesNotExist, found) => found.is_none(),
            (LabelOperator::GreaterThan | LabelOperator::LessThan, Some(v)) => {
                let (Ok(actual), Some(Ok(bound))) = (
                    v.parse::<i64>(),
                    self.values.first().map(|b| b.parse::<i64>()),
                ) else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
            (LabelOperator::GreaterThan | LabelOperator::LessThan, None) => false,
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map_or("", String::as_str);
        match self.operator {
            LabelOperator::Equals => write!(f, "{}={}", self.key, first),
            LabelOperator::NotEquals => write!(f, "{}!={}", self.key, first),
            LabelOperator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            LabelOperator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            LabelOperator::Exists => write!(f, "{}", self.key),
            LabelOperator::DoesNotExist => write!(f, "!{}", self.key),
            LabelOperator::GreaterThan => write!(f, "{}>{}", self.key, first),
            LabelOperator::LessThan => write!(f, "{}<{}", self.key, first),
        }
    }
}

/// A parsed `labelSelector`: every requirement must hold (they are ANDed).
/// The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parses Kubernetes label selector syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
    /// `a notin (x,y)`, `a`, `!a`, `a>1`, `a<1`, comma-separated, spaces allowed between tokens.
    pub fn parse(selector: &str) -> Result<LabelSelector, SelectorError> {
        LabelParser::new(selector).parse_all()
    }

    /// Whether a JSON `metadata.labels` map (or none at all) satisfies every requirement.
    /// Non-string label values are treated as absent.
    pub fn matches_json_labels(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|requirement| {
            let value = labels
                .and_then(|labels| labels.get(&requirement.key))
                .and_then(Value::as_str);
            requirement.matches_value(value)
        })
    }

    /// Matches an object by its `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object
            .get("metadata")
            .and_then(|metadata| metadata.get("labels"))
            .and_then(Value::as_object);
        self.matches_json_labels(labels)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        write!(f, "{}", terms.join(","))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Identifier(text) => format!("'{text}'"),
            Token::Not => "'!'".into(),
            Token::Equals => "'='".into(),
            Token::DoubleEquals => "'=='".into(),
            Token::NotEquals => "'!='".into(),
            Token::GreaterThan => "'>'".into(),
            Token::LessThan => "'<'".into(),
            Token::OpenParen => "'('".into(),
            Token::CloseParen => "')'".into(),
            Token::Comma => "','".into(),
            Token::End => "end of selector".into(),
        }
    }
}

/// Splits a label selector into tokens, remembering where each starts, then parses them the way
/// apimachinery's hand-written parser does.
struct LabelParser<'a> {
    selector: &'a str,
    tokens: Vec<(Token, usize)>,
    position: usize,
}

impl<'a> LabelParser<'a> {
    fn new(selector: &'a str) -> Self {
        LabelParser {
            selector,
            tokens: lex_label_selector(selector),
            position: 0,
        }
    }

    fn peek(&self) -> &Token {
        &self.tokens[self.position].0
    }

    fn next(&mut self) -> Token {
        let token = self.tokens[self.position].0.clone();
        if self.position + 1 < self.tokens.len() {
            self.position += 1;
        }
        token
    }

    fn parse_all(mut self) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if *self.peek() == Token::End {
            return Ok(LabelSelector { requirements });
        }
        loop {
            let term_start = self.tokens[self.position].1;
            let requirement = self
                .parse_requirement()
                .map_err(|problem| self.error(term_start, problem))?;
            requirements.push(requirement);
            match self.next() {
                Token::End => break,
                Token::Comma if *self.peek() != Token::End => continue,
                Token::Comma => {
                    return Err(self.error(
                        term_start,
                        "a trailing ',' must be followed by a requirement".into(),
                    ))
                }
                other => {
                    return Err(self.error(
                        term_start,
                        format!(
                            "found {}, expected ',' or end of selector",
                            other.describe()
                        ),
                    ))
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, String> {
        let negated = *self.peek() == Token::Not;
        if negated {
            self.next();
        }
        let key = match self.next() {
            Token::Identifier(key) => key,
            other => return Err(format!("found {}, expected a label key", other.describe())),
        };
        validate_label_key(&key)?;
        if negated {
            return match self.peek() {
                Token::Comma | Token::End => Ok(LabelRequirement {
                    key,
                    operator: LabelOperator::DoesNotExist,
                    values: Vec::new(),
                }),
                other => Err(format!(
                    "found {}, expected ',' or end after '!{key}'",
                    other.describe()
                )),
            };
        }
        let operator = match self.peek().clone() {
            Token::Comma | Token::End => {
                return Ok(LabelRequirement {
                    key,
                    operator: LabelOperator::Exists,
                    values: Vec::new(),
                })
            }
            Token::Equals | Token::DoubleEquals => LabelOperator::Equals,
            Token::NotEquals => LabelOperator::NotEquals,
            Token::GreaterThan => LabelOperator::GreaterThan,
            Token::LessThan => LabelOperator::LessThan,
            Token::Identifier(word) if word == "in" => LabelOperator::In,
            Token::Identifier(word) if word == "notin" => LabelOperator::NotIn,
            other => {
                return Err(format!(
                    "found {}, expected one of '=', '==', '!=', 'in', 'notin', '>', '<'",
                    other.describe()
                ))
            }
        };
        self.next();
        let values = match operator {
            LabelOperator::In | LabelOperator::NotIn => self.parse_value_set()?,
            _ => vec![self.parse_single_value()?],
        };
        for value in &values {
            validate_label_value(value)?;
        }
        if matches!(
            operator,
            LabelOperator::GreaterThan | LabelOperator::LessThan
        ) && values[0].parse::<i64>().is_err()
        {
            return Err(format!(
                "for '>' and '<' the value must be an integer, not '{}'",
                values[0]
            ));
        }
        Ok(LabelRequirement {
            key,
            operator,
            values,
        })
    }

    /// After `=`: one value, which may be empty (`tier=` selects an empty label value).
    fn parse_single_value(&mut self) -> Result<String, String> {
        match self.peek().clone() {
            Token::Identifier(value) => {
                self.next();
                Ok(value)
            }
            Token::Comma | Token::End => Ok(String::new()),
            other => Err(format!("found {}, expected a value", other.describe())),
        }
    }

    /// After `in`/`notin`: `(a, b, c)`. An empty slot (`(a,)`) is the empty value, as upstream.
    fn parse_value_set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Token::OpenParen => {}
            other => return Err(format!("found {}, expected '('", other.describe())),
        }
        let mut values = Vec::new();
        let mut expecting_value = true;
        loop {
            match self.next() {
                Token::Identifier(value) if expecting_value => {
                    values.push(value);
                    expecting_value = false;
                }
                Token::Comma => {
                    if expecting_value {
                        values.push(String::new());
                    }
                    expecting_value = true;
                }
                Token::CloseParen => {
                    if expecting_value && !values.is_empty() {
                        values.push(String::new());
                    }
                    break;
                }
                other => {
                    return Err(format!(
                        "found {}, expected a value, ',' or ')'",
                        other.describe()
                    ))
                }
            }
        }
        if values.is_empty() {
            return Err("for 'in' and 'notin' the set of values must not be empty".into());
        }
        Ok(values)
    }

    /// Builds the error, quoting the term from its start to the next comma outside parentheses.
    fn error(&self, term_start: usize, problem: String) -> SelectorError {
        let rest = &self.selector[term_start..];
        let mut depth = 0usize;
        let mut end = rest.len();
        for (index, character) in rest.char_indices() {
            match character {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    end = index;
                    break;
                }
                _ => {}
            }
        }
        SelectorError::LabelTerm {
            selector: self.selector.to_string(),
            term: rest[..end].trim().to_string(),
            problem,
        }
    }
}

fn lex_label_selector(selector: &str) -> Vec<(Token, usize)> {
    let mut tokens = Vec::new();
    let mut characters = selector.char_indices().peekable();
    while let Some((start, character)) = characters.next() {
        let token = match character {
            c if c.is_whitespace() => continue,
            ',' => Token::Comma,
            '(' => Token::OpenParen,
            ')' => Token::CloseParen,
            '>' => Token::GreaterThan,
            '<' => Token::LessThan,
            '!' => {
                if characters.next_if(|&(_, c)| c == '=').is_some() {
                    Token::NotEquals
                } else {
                    Token::Not
                }
            }
            '=' => {
                if characters.next_if(|&(_, c)| c == '=').is_some() {
                    Token::DoubleEquals
                } else {
                    Token::Equals
                }
            }
            first => {
                let mut text = String::from(first);
                while let Some((_, c)) =
                    characters.next_if(|&(_, c)| !c.is_whitespace() && !"!=,()<>".contains(c))
                {
                    text.push(c);
                }
                Token::Identifier(text)
            }
        };
        tokens.push((token, start));
    }
    tokens.push((Token::End, selector.len()));
    tokens
}

/// Label keys are qualified names (`[prefix/]name`), checked with apimachinery's wording.
fn validate_label_key(key: &str) -> Result<(), String> {
    crate::names::validate_qualified_name(key)
        .map_err(|problem| format!("invalid label key \"{key}\": {problem}"))
}

/// Label values are empty or a qualified name part.
fn validate_label_value(value: &str) -> Result<(), String> {
    crate::names::validate_label_value(value)
        .map_err(|problem| format!("invalid label value \"{value}\": {problem}"))
}

/// How one field requirement compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `=` or `==`
    Equals,
    /// `!=`
    NotEquals,
}

/// One comma-separated term of a field selector, e.g. `metadata.name=db1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// A dotted path into the object, e.g. `involvedObject.name`.
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

impl FieldRequirement {
    /// Whether the object's field (read by dotted path, missing = "") satisfies this term.
    pub fn matches(&self, object: &Value) -> bool {
        let actual = field_as_string(object, &self.field);
        match self.operator {
            FieldOperator::Equals => actual == self.value,
            FieldOperator::NotEquals => actual != self.value,
        }
    }
}

/// A parsed `fieldSelector`: every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `field=value`, `field==value`, `field!=value`, comma-separated.
    /// `\,`, `\=` and `\\` escape those characters inside a value, as in apimachinery.
    /// Spaces around fields and values are trimmed (upstream keeps them; no real field has any).
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped_commas(selector) {
            if term.trim().is_empty() {
                continue;
            }
            let error = |problem: &str| SelectorError::FieldTerm {
                selector: selector.to_string(),
                term: term.to_string(),
                problem: problem.to_string(),
            };
            let Some((field, operator, raw_value)) = split_field_term(term) else {
                return Err(error("expected field=value, field==value or field!=value"));
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(error("the field name is empty"));
            }
            let value = unescape_field_value(raw_value.trim()).map_err(|p| error(&p))?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|r| r.matches(object))
    }
}

/// Reads `a.b.c` from an object as a string: strings as they are, numbers and booleans in their
/// JSON form, and a missing field or null as "" (so `spec.nodeName=` selects unscheduled pods).
pub fn field_as_string(object: &Value, dotted_path: &str) -> String {
    let mut current = object;
    for segment in dotted_path.split('.') {
        match current.get(segment) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn split_unescaped_commas(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (index, byte) in selector.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if byte == b'\\' {
            escaped = true;
        } else if byte == b',' {
            terms.push(&selector[start..index]);
            start = index + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Finds the first operator, trying `!=` and `==` before `=` at each position, as upstream does.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let mut escaped = false;
    for (index, character) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if character == '\\' {
            escaped = true;
            continue;
        }
        let rest = &term[index..];
        for (symbol, operator) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(symbol) {
                return Some((&term[..index], operator, value));
            }
        }
    }
    None
}

fn unescape_field_value(raw: &str) -> Result<String, String> {
    let mut value = String::with_capacity(raw.len());
    let mut characters = raw.chars();
    while let Some(character) = characters.next() {
        match character {
            '\\' => match characters.next() {
                Some(escaped @ ('\\' | ',' | '=')) => value.push(escaped),
                Some(other) => return Err(format!("invalid escape sequence '\\{other}'")),
                None => return Err("a value cannot end with a lone '\\'".into()),
            },
            ',' | '=' => {
                return Err(format!(
                    "'{character}' in a value must be escaped as '\\{character}'"
                ))
            }
            other => value.push(other),
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// An object whose `metadata.labels` are these pairs.
    fn labelled(pairs: &[(&str, &str)]) -> Value {
        let labels: Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    /// Every operator parses into the requirement it names.
    #[test]
    fn parses_each_operator() {
        let selector =
            LabelSelector::parse("a=b,c==d,e!=f,g in (x,y),h notin (z),i,!j,k>3,l<4").unwrap();
        let operators: Vec<_> = selector
            .requirements
            .iter()
            .map(|r| r.operator.clone())
            .collect();
        assert_eq!(
            operators,
            vec![
                LabelOperator::Equals,
                LabelOperator::Equals,
                LabelOperator::NotEquals,
                LabelOperator::In,
                LabelOperator::NotIn,
                LabelOperator::Exists,
                LabelOperator::DoesNotExist,
                LabelOperator::GreaterThan,
                LabelOperator::LessThan,
            ]
        );
        assert_eq!(selector.requirements[3].values, vec!["x", "y"]);
        assert_eq!(
            selector.to_string(),
            "a=b,c=d,e!=f,g in (x,y),h notin (z),i,!j,k>3,l<4"
        );
    }

    /// Whitespace between tokens is ignored; `in`/`notin` still need their parentheses.
    #[test]
    fn tolerates_whitespace() {
        let spaced =
            LabelSelector::parse("  tier = db ,  env in ( prod , staging ) , ! gone ").unwrap();
        let tight = LabelSelector::parse("tier=db,env in (prod,staging),!gone").unwrap();
        assert_eq!(spaced, tight);
    }

    /// Empty selectors match everything; negative operators match absent labels.
    #[test]
    fn matching_semantics() {
        let db = labelled(&[("tier", "db"), ("env", "prod"), ("replicas", "3")]);
        let bare = labelled(&[]);
        let everything = LabelSelector::parse("").unwrap();
        assert!(everything.requirements.is_empty() && everything.matches_object(&bare));

        let check = |selector: &str, object: &Value| {
            LabelSelector::parse(selector)
                .unwrap()
                .matches_object(object)
        };
        assert!(check("tier=db", &db));
        assert!(!check("tier=db", &bare));
        assert!(check("tier!=web", &db));
        assert!(check("tier!=web", &bare));
        assert!(!check("tier!=db", &db));
        assert!(check("env in (staging,prod)", &db));
        assert!(!check("env in (staging)", &bare));
        assert!(check("env notin (staging)", &bare));
        assert!(!check("env notin (prod)", &db));
        assert!(check("tier", &db) && !check("tier", &bare));
        assert!(check("!tier", &bare) && !check("!tier", &db));
        assert!(check("replicas>2", &db) && !check("replicas>3", &db));
        assert!(check("replicas<4", &db) && !check("replicas<4", &bare));
        assert!(check("tier=db,env=prod", &db));
        assert!(!check("tier=db,env=dev", &db));
    }

    /// `tier=` selects an empty value; `(a,)` includes the empty value.
    #[test]
    fn empty_values() {
        let empty = labelled(&[("tier", "")]);
        assert!(LabelSelector::parse("tier=")
            .unwrap()
            .matches_object(&empty));
        let set = LabelSelector::parse("tier in (a,)").unwrap();
        assert_eq!(set.requirements[0].values, vec!["a", ""]);
        assert!(set.matches_object(&empty));
    }

    /// Prefixed keys such as `app.kubernetes.io/name` parse; invalid keys and values do not.
    #[test]
    fn validates_keys_and_values() {
        assert!(LabelSelector::parse("app.kubernetes.io/name=pg").is_ok());
        for bad in [
            "-a=b",
            "a=b c",
            "a=-b",
            "Bad_Prefix/x=y",
            &format!("a={}", "v".repeat(64)),
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should fail");
        }
    }

    /// Errors quote the offending term and say what was expected.
    #[test]
    fn errors_name_the_bad_term() {
        let error = LabelSelector::parse("tier=db,env in (prod").unwrap_err();
        let SelectorError::LabelTerm { term, problem, .. } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(term, "env in (prod");
        assert!(
            problem.contains("expected a value, ',' or ')'"),
            "{problem}"
        );

        let cases = [
            ("a in ()", "a in ()", "must not be empty"),
            ("a in x", "a in x", "expected '('"),
            ("a=b,", "a=b", "trailing ','"),
            (",a", "", "expected a label key"),
            ("a b", "a b", "expected one of"),
            ("!a=b", "!a=b", "expected ',' or end"),
            ("a>x", "a>x", "must be an integer"),
            ("a=b=c", "a=b=c", "expected ',' or end of selector"),
        ];
        for (selector, expected_term, expected_problem) in cases {
            match LabelSelector::parse(selector) {
                Err(SelectorError::LabelTerm { term, problem, .. }) => {
                    assert_eq!(term, expected_term, "{selector}");
                    assert!(problem.contains(expected_problem), "{selector}: {problem}");
                }
                other => panic!("{selector}: {other:?}"),
            }
        }
        assert!(error.to_string().starts_with("invalid label selector"));
    }

    /// Label matching works straight on a JSON object's metadata.labels.
    #[test]
    fn matches_json_objects() {
        let object = json!({"metadata": {"name": "db1", "labels": {"tier": "db"}}});
        let unlabelled = json!({"metadata": {"name": "db2"}});
        let selector = LabelSelector::parse("tier=db").unwrap();
        assert!(selector.matches_object(&object));
        assert!(!selector.matches_object(&unlabelled));
        assert!(LabelSelector::parse("!tier")
            .unwrap()
            .matches_object(&unlabelled));
    }

    /// Field selectors as kubectl sends them for describe, delete --wait and get -w.
    #[test]
    fn field_selectors_match_by_path() {
        let event = json!({
            "metadata": {"name": "db1.17", "namespace": "default"},
            "involvedObject": {"name": "db1", "namespace": "default", "kind": "PostgresCluster", "uid": "u1"},
            "count": 2, "spec": {"unschedulable": false}
        });
        let describe = FieldSelector::parse(
            "involvedObject.name=db1,involvedObject.namespace=default,involvedObject.kind=PostgresCluster,involvedObject.uid=u1",
        )
        .unwrap();
        assert!(describe.matches(&event));
        assert!(!FieldSelector::parse("involvedObject.name=db2")
            .unwrap()
            .matches(&event));
        assert!(FieldSelector::parse("count==2").unwrap().matches(&event));
        assert!(FieldSelector::parse("spec.unschedulable=false")
            .unwrap()
            .matches(&event));
        assert!(FieldSelector::parse("spec.nodeName=")
            .unwrap()
            .matches(&event));
        assert!(FieldSelector::parse("spec.nodeName!=n1")
            .unwrap()
            .matches(&event));
        assert!(FieldSelector::parse("").unwrap().matches(&event));
    }

    /// Escaped commas and equals signs stay inside the value; bad escapes are errors.
    #[test]
    fn field_selector_escapes_and_errors() {
        let selector =
            FieldSelector::parse(r"metadata.name=a\,b\=c\\d,status.phase!=Running").unwrap();
        assert_eq!(selector.requirements[0].value, r"a,b=c\d");
        assert_eq!(selector.requirements[1].operator, FieldOperator::NotEquals);

        let cases = [
            ("metadata.name", "metadata.name", "expected field=value"),
            ("=x", "=x", "field name is empty"),
            (r"a=b\q", r"a=b\q", "invalid escape"),
            ("a=b=c", "a=b=c", "must be escaped"),
        ];
        for (input, expected_term, expected_problem) in cases {
            match FieldSelector::parse(input) {
                Err(SelectorError::FieldTerm { term, problem, .. }) => {
                    assert_eq!(term, expected_term, "{input}");
                    assert!(problem.contains(expected_problem), "{input}: {problem}");
                }
                other => panic!("{input}: {other:?}"),
            }
        }
    }

    /// Non-ASCII values are fine in field selectors (no byte-slicing mid-character).
    #[test]
    fn field_selector_unicode_values() {
        let selector = FieldSelector::parse("metadata.name=żółw,spec.x!=é").unwrap();
        assert!(selector.matches(&json!({"metadata": {"name": "żółw"}})));
        assert!(LabelSelector::parse("a=żółw").is_err());
    }

    /// Error messages carry apimachinery's wording for bad keys and values.
    #[test]
    fn label_errors_use_kubernetes_wording() {
        let error = LabelSelector::parse("tier=-db").unwrap_err().to_string();
        assert!(
            error.contains("invalid label value \"-db\": a valid label must be an empty string"),
            "{error}"
        );
        let error = LabelSelector::parse("/x").unwrap_err().to_string();
        assert!(
            error.contains("invalid label key \"/x\": prefix part must be non-empty"),
            "{error}"
        );
    }

    fn requirement() -> impl Strategy<Value = LabelRequirement> {
        let key = "([a-z]{1,3}\\.)?[a-z]{1,3}(/[A-Za-z0-9]{1,3})?";
        let value = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,3}[A-Za-z0-9])?";
        (key, prop::collection::vec(value, 1..4), 0..8u8).prop_map(|(key, values, pick)| {
            let (operator, values) = match pick {
                0 => (LabelOperator::Equals, vec![values[0].clone()]),
                1 => (LabelOperator::NotEquals, vec![values[0].clone()]),
                2 => (LabelOperator::In, values),
                3 => (LabelOperator::NotIn, values),
                4 => (LabelOperator::Exists, vec![]),
                5 => (LabelOperator::DoesNotExist, vec![]),
                6 => (LabelOperator::GreaterThan, vec![values.len().to_string()]),
                _ => (LabelOperator::LessThan, vec![values.len().to_string()]),
            };
            LabelRequirement {
                key,
                operator,
                values,
            }
        })
    }

    proptest! {
        /// Printing a selector and parsing it back gives the same selector.
        #[test]
        fn label_selector_display_round_trips(requirements in prop::collection::vec(requirement(), 0..5)) {
            let selector = LabelSelector { requirements };
            let text = selector.to_string();
            prop_assert_eq!(LabelSelector::parse(&text), Ok(selector), "{}", text);
        }

        /// A selector never panics on arbitrary input; it parses or names a term.
        #[test]
        fn label_selector_total_on_garbage(text in "[a-z!=(), <>in]{0,24}") {
            match LabelSelector::parse(&text) {
                Ok(_) => {}
                Err(SelectorError::LabelTerm { selector, .. }) => prop_assert_eq!(selector, text),
                Err(other) => prop_assert!(false, "{:?}", other),
            }
        }
    }
}

//! `${env:VAR}` substitution, done on the parsed YAML tree (never on the raw text), so a
//! variable's value can not inject YAML structure.
//!
//! Forms, in any string scalar value (mapping keys are left alone):
//! - `${env:NAME}`: the variable's value; unset → empty string and a warning (like the Collector).
//! - `${env:NAME:-default}`: the variable's value, or `default` when it is unset.
//! - `$$`: a literal `$` (so `$${env:X}` is the text `${env:X}`). A `$` followed by anything
//!   else is kept as written.
//!
//! When the whole scalar is a single reference, the substituted text is read as a YAML scalar:
//! `true`/`false` become booleans, numbers stay numbers (when written canonically, so text keys
//! such as a token get back exactly what was written), and an empty result is null, which makes
//! the key take its default. Otherwise the result is interpolated into a string.

use std::path::Path;

use serde_yaml_ng::Value;

use super::error::ConfigProblem;

const HELP: &str = "write ${env:NAME} or ${env:NAME:-default}, or $$ for a literal $";

/// Substitutes every reference in the string scalars of `root`, in place. Returns every
/// malformed reference found (the tree is then not fully substituted and must not be used).
pub(crate) fn expand_env(
    root: &mut Value,
    env: &dyn Fn(&str) -> Option<String>,
    file: &Path,
) -> Vec<ConfigProblem> {
    let mut walker = Walker {
        env,
        file,
        path: Vec::new(),
        problems: Vec::new(),
    };
    walker.walk(root);
    walker.problems
}

struct Walker<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    file: &'a Path,
    path: Vec<String>,
    problems: Vec<ConfigProblem>,
}

impl Walker<'_> {
    fn walk(&mut self, value: &mut Value) {
        match value {
            Value::String(text) => {
                if let Some(replacement) = self.expand_string(text) {
                    *value = replacement;
                }
            }
            Value::Sequence(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    self.path.push(format!("[{index}]"));
                    self.walk(item);
                    self.path.pop();
                }
            }
            Value::Mapping(mapping) => {
                for (key, item) in mapping.iter_mut() {
                    self.path.push(key_label(key));
                    self.walk(item);
                    self.path.pop();
                }
            }
            Value::Tagged(tagged) => self.walk(&mut tagged.value),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// The new value for the scalar `text`, or `None` when it has nothing to substitute (or is
    /// malformed, in which case a problem is recorded).
    fn expand_string(&mut self, text: &str) -> Option<Value> {
        if !text.contains('$') {
            return None;
        }
        match substitute(text, self.env) {
            Ok(expansion) => {
                let key = join_path(&self.path);
                for name in &expansion.unset {
                    tracing::warn!(
                        file = %self.file.display(),
                        key = %key,
                        variable = %name,
                        "environment variable is not set and has no default; substituting an empty string"
                    );
                }
                Some(if expansion.whole_reference {
                    typed_scalar(expansion.text)
                } else {
                    Value::String(expansion.text)
                })
            }
            Err(message) => {
                self.problems
                    .push(ConfigProblem::new(join_path(&self.path), message));
                None
            }
        }
    }
}

/// Joins path segments with `.`, except before a sequence index (`a.b[0].c`).
fn join_path(segments: &[String]) -> String {
    let mut path = String::new();
    for segment in segments {
        if !path.is_empty() && !segment.starts_with('[') {
            path.push('.');
        }
        path.push_str(segment);
    }
    path
}

/// A mapping key as it appears in a key path.
pub(crate) fn key_label(key: &Value) -> String {
    match key {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Null => "~".to_owned(),
        Value::Sequence(_) | Value::Mapping(_) | Value::Tagged(_) => "?".to_owned(),
    }
}

/// The result of substituting one scalar.
#[derive(Debug, PartialEq)]
struct Expansion {
    /// The substituted text.
    text: String,
    /// Whether the scalar was exactly one `${...}` reference.
    whole_reference: bool,
    /// Variables that were unset and had no default.
    unset: Vec<String>,
}

/// Substitutes the references in `text`; a message on the first malformed one.
fn substitute(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Expansion, String> {
    let mut out = String::with_capacity(text.len());
    let mut unset = Vec::new();
    let mut whole_reference = false;
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body_and_tail) = after.strip_prefix('{') {
            let close = body_and_tail.find('}').ok_or_else(|| {
                format!(
                    "unterminated reference {:?}: missing '}}'; {HELP}",
                    &rest[dollar..]
                )
            })?;
            let body = &body_and_tail[..close];
            let tail = &body_and_tail[close + 1..];
            let reference = &rest[dollar..rest.len() - tail.len()];
            whole_reference = reference.len() == text.len();
            let (name, default) = parse_reference(body, reference)?;
            match env(name) {
                Some(value) => out.push_str(&value),
                None => match default {
                    Some(default) => out.push_str(default),
                    None => unset.push(name.to_owned()),
                },
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(Expansion {
        text: out,
        whole_reference,
        unset,
    })
}

/// Splits the inside of `${...}` into variable name and optional default.
fn parse_reference<'t>(
    body: &'t str,
    reference: &str,
) -> Result<(&'t str, Option<&'t str>), String> {
    let Some(spec) = body.strip_prefix("env:") else {
        return Err(match body.split_once(':') {
            Some((scheme, _)) if !scheme.is_empty() => format!(
                "unsupported reference {reference:?}: scheme {scheme:?} is not supported; {HELP}"
            ),
            _ if is_variable_name(body) => {
                format!(
                    "unsupported reference {reference:?}: did you mean \"${{env:{body}}}\"? {HELP}"
                )
            }
            _ => format!("malformed reference {reference:?}; {HELP}"),
        });
    };
    let (name, default) = match spec.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (spec, None),
    };
    if name.is_empty() {
        return Err(format!(
            "malformed reference {reference:?}: empty variable name; {HELP}"
        ));
    }
    if !is_variable_name(name) {
        return Err(format!(
            "malformed reference {reference:?}: {name:?} is not a valid variable name \
             (letters, digits and '_', not starting with a digit)"
        ));
    }
    Ok((name, default))
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads substituted text as a YAML scalar: booleans, canonically written numbers and null
/// (empty, `~`, `null`) are typed; anything else stays the exact text.
fn typed_scalar(text: String) -> Value {
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(Value::Number(number)) = serde_yaml_ng::from_str::<Value>(&text) {
        if number.to_string() == text {
            return Value::Number(number);
        }
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn expand(yaml: &str, env: &dyn Fn(&str) -> Option<String>) -> (Value, Vec<ConfigProblem>) {
        let mut value: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let problems = expand_env(&mut value, env, Path::new("test.yaml"));
        (value, problems)
    }

    #[test]
    fn substitutes_set_variable() {
        let env = env_of(&[("HOST", "10.0.0.1")]);
        let (value, problems) = expand("a: ${env:HOST}", &env);
        assert!(problems.is_empty());
        assert_eq!(value["a"], Value::String("10.0.0.1".into()));
    }

    #[test]
    fn default_applies_only_when_unset() {
        let env = env_of(&[("SET", "from-env"), ("EMPTY", "")]);
        let (value, _) = expand(
            "a: ${env:UNSET:-fallback}\nb: ${env:SET:-fallback}\nc: x${env:EMPTY:-fallback}y",
            &env,
        );
        assert_eq!(value["a"], Value::String("fallback".into()));
        assert_eq!(value["b"], Value::String("from-env".into()));
        assert_eq!(value["c"], Value::String("xy".into()));
    }

    #[test]
    fn default_may_contain_colons_and_dashes() {
        let (value, _) = expand(
            "a: ${env:EP:-127.0.0.1:4317}\nb: ${env:X:-a:-b}",
            &env_of(&[]),
        );
        assert_eq!(value["a"], Value::String("127.0.0.1:4317".into()));
        assert_eq!(value["b"], Value::String("a:-b".into()));
    }

    #[test]
    fn unset_without_default_is_empty() {
        let (value, problems) = expand("a: ${env:NOPE}\nb: pre-${env:NOPE}-post", &env_of(&[]));
        assert!(problems.is_empty());
        assert_eq!(value["a"], Value::Null);
        assert_eq!(value["b"], Value::String("pre--post".into()));
    }

    #[test]
    fn interpolates_several_references_and_escapes() {
        let env = env_of(&[("A", "1"), ("B", "two")]);
        let (value, _) = expand(
            "a: ${env:A}-${env:B}\nb: cost $$5\nc: $${env:A}\nd: lone $ sign\ne: $$${env:B}\nf: 5$",
            &env,
        );
        assert_eq!(value["a"], Value::String("1-two".into()));
        assert_eq!(value["b"], Value::String("cost $5".into()));
        assert_eq!(value["c"], Value::String("${env:A}".into()));
        assert_eq!(value["d"], Value::String("lone $ sign".into()));
        assert_eq!(value["e"], Value::String("$two".into()));
        assert_eq!(value["f"], Value::String("5$".into()));
    }

    #[test]
    fn whole_reference_is_typed() {
        let env = env_of(&[
            ("SYNC", "false"),
            ("SIZE", "32"),
            ("RATIO", "0.5"),
            ("TOKEN", "007"),
            ("HEX", "0x1F"),
        ]);
        let (value, _) = expand(
            "a: ${env:SYNC}\nb: ${env:SIZE}\nc: ${env:RATIO}\nd: ${env:TOKEN}\ne: ${env:HEX}\n\
             f: ${env:UNSET:-true}\ng: x${env:SIZE}\nh: '${env:SIZE}'",
            &env,
        );
        assert_eq!(value["a"], Value::Bool(false));
        assert_eq!(value["b"], Value::Number(32.into()));
        assert_eq!(value["c"], serde_yaml_ng::from_str::<Value>("0.5").unwrap());
        assert_eq!(value["d"], Value::String("007".into()));
        assert_eq!(value["e"], Value::String("0x1F".into()));
        assert_eq!(value["f"], Value::Bool(true));
        assert_eq!(value["g"], Value::String("x32".into()));
        // Quoting in YAML does not change anything: the scalar is one reference.
        assert_eq!(value["h"], Value::Number(32.into()));
    }

    #[test]
    fn value_can_not_inject_structure() {
        let env = env_of(&[("EVIL", "a: b\nc: [d]")]);
        let (value, _) = expand("x: ${env:EVIL}", &env);
        assert_eq!(value["x"], Value::String("a: b\nc: [d]".into()));
    }

    #[test]
    fn walks_sequences_and_nested_mappings_but_not_keys() {
        let env = env_of(&[("R", "otlp")]);
        let (value, _) = expand("${env:R}: [x, '${env:R}', {k: '${env:R}'}]", &env);
        let list = &value["${env:R}"];
        assert_eq!(list[1], Value::String("otlp".into()));
        assert_eq!(list[2]["k"], Value::String("otlp".into()));
    }

    #[test]
    fn malformed_references_are_errors_with_paths() {
        let (_, problems) = expand(
            "a:\n  b: ${env:}\n  c: [ok, '${env:X']\nd: ${HOME}\ne: ${file:/x}\nf: ${env:1BAD}\ng: ${}",
            &env_of(&[]),
        );
        let rendered: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(rendered.len(), 6, "{rendered:#?}");
        assert!(
            rendered[0].starts_with("a.b: malformed reference \"${env:}\": empty variable name")
        );
        assert!(rendered[1].starts_with("a.c[1]: unterminated reference \"${env:X\""));
        assert!(rendered[2].starts_with("d: unsupported reference \"${HOME}\": did you mean"));
        assert!(rendered[3].contains("scheme \"file\" is not supported"));
        assert!(rendered[4].starts_with("f: malformed reference"));
        assert!(rendered[5].starts_with("g: malformed reference \"${}\""));
    }
}

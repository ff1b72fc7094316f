//! `processors.stepline.trigger` (the attribute keys that say who started a run) and
//! `processors.stepline.run_attributes` (attribute keys copied onto the run record): their YAML
//! shape and their validation into [`RunInfoKeys`]. Pure.

use serde::Deserialize;

use super::text::Text;
use crate::domain::trigger::{check_key, MAX_RUN_ATTRIBUTES};
use crate::domain::RunInfoKeys;

/// `processors.stepline.trigger`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrigger {
    /// `kind_key`: the attribute whose value is the trigger kind (default
    /// `stepline.trigger.kind`).
    pub(crate) kind_key: Option<Text>,
    /// `meta_prefix`: attributes under it are the trigger's meta, without the prefix (default
    /// `stepline.trigger.`; empty: no meta).
    pub(crate) meta_prefix: Option<Text>,
}

/// Validates `trigger` and `run_attributes`; problems go to `problem(key, message)`, the key
/// relative to `processors.stepline` (`trigger.kind_key`, `run_attributes[2]`).
pub(crate) fn validate_run_info(
    trigger: Option<RawTrigger>,
    run_attributes: Option<Vec<Text>>,
    problem: &mut impl FnMut(String, String),
) -> Option<RunInfoKeys> {
    let mut keys = RunInfoKeys::default();
    let mut valid = true;
    let trigger = trigger.unwrap_or_default();
    if let Some(Text(kind_key)) = trigger.kind_key {
        if let Err(message) = check_key(&kind_key) {
            problem("trigger.kind_key".into(), message);
            valid = false;
        }
        keys.kind_key = kind_key;
    }
    if let Some(Text(prefix)) = trigger.meta_prefix {
        // Empty turns meta off; otherwise a key like any other.
        if let Err(message) =
            check_key(&prefix).or_else(|m| if prefix.is_empty() { Ok(()) } else { Err(m) })
        {
            problem("trigger.meta_prefix".into(), message);
            valid = false;
        }
        keys.meta_prefix = prefix;
    }
    let attributes = run_attributes.unwrap_or_default();
    if attributes.len() > MAX_RUN_ATTRIBUTES {
        problem(
            "run_attributes".into(),
            format!(
                "lists {} keys; at most {MAX_RUN_ATTRIBUTES} are allowed",
                attributes.len()
            ),
        );
        valid = false;
    }
    for (i, Text(key)) in attributes.into_iter().enumerate() {
        if let Err(message) = check_key(&key) {
            problem(format!("run_attributes[{i}]"), message);
            valid = false;
        } else if keys.attributes.contains(&key) {
            problem(
                format!("run_attributes[{i}]"),
                format!("{key:?} is listed twice"),
            );
            valid = false;
        } else {
            keys.attributes.push(key);
        }
    }
    valid.then_some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(yaml: &str) -> Result<RunInfoKeys, Vec<String>> {
        #[derive(Deserialize)]
        struct Both {
            trigger: Option<RawTrigger>,
            run_attributes: Option<Vec<Text>>,
        }
        let both: Both = serde_yaml_ng::from_str(yaml).unwrap();
        let mut problems = Vec::new();
        let keys = validate_run_info(both.trigger, both.run_attributes, &mut |k, m| {
            problems.push(format!("{k}: {m}"))
        });
        keys.ok_or(problems)
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(validate("{}").unwrap(), RunInfoKeys::default());
        let keys = validate(
            "trigger: {kind_key: app.trigger, meta_prefix: 'app.trigger.'}\n\
             run_attributes: [tenant, enduser.id]\n",
        )
        .unwrap();
        assert_eq!(keys.kind_key, "app.trigger");
        assert_eq!(keys.meta_prefix, "app.trigger.");
        assert_eq!(keys.attributes, ["tenant", "enduser.id"]);
        assert_eq!(
            validate("trigger: {meta_prefix: ''}\n")
                .unwrap()
                .meta_prefix,
            ""
        );
    }

    #[test]
    fn bad_keys_are_refused_with_their_path() {
        let long = "k".repeat(200);
        let problems = validate(&format!(
            "trigger: {{kind_key: ''}}\nrun_attributes: [tenant, tenant, '{long}', '']\n"
        ))
        .unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert_eq!(problems[0], "trigger.kind_key: must not be empty");
        assert_eq!(problems[1], "run_attributes[1]: \"tenant\" is listed twice");
        assert!(problems[2].starts_with("run_attributes[2]: must be at most 128 bytes"));
        assert_eq!(problems[3], "run_attributes[3]: must not be empty");
        let many: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let problems = validate(&format!("run_attributes: [{}]\n", many.join(", "))).unwrap_err();
        assert_eq!(
            problems,
            ["run_attributes: lists 40 keys; at most 32 are allowed"]
        );
    }
}

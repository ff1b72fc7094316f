//! Who started a run and the attributes it is filed under: the [`Trigger`] and attribute map on
//! the run record, the [`RunInfo`] one span contributes to them, and the configured keys
//! ([`RunInfoKeys`]) that pick them out of a span's resource and span attributes.
//!
//! Everything here is chosen by the sender, so every piece has a byte budget: values over
//! [`MAX_VALUE_BYTES`] (or with a NUL byte) and meta keys over [`MAX_KEY_BYTES`] are left out
//! with a warning, and at most [`MAX_META_KEYS`] trigger meta keys are kept per span and per
//! run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bytes of one kept attribute value (trigger kind, meta value, run attribute value).
pub const MAX_VALUE_BYTES: usize = 256;
/// Bytes of one kept key (a configured key, or a trigger meta key after its prefix).
pub const MAX_KEY_BYTES: usize = 128;
/// Trigger meta keys kept per span and per run.
pub const MAX_META_KEYS: usize = 32;
/// Keys `run_attributes` may list.
pub const MAX_RUN_ATTRIBUTES: usize = 32;

/// Default [`RunInfoKeys::kind_key`].
pub const DEFAULT_KIND_KEY: &str = "stepline.trigger.kind";
/// Default [`RunInfoKeys::meta_prefix`].
pub const DEFAULT_META_PREFIX: &str = "stepline.trigger.";

/// Who or what started a run (`trigger` on the run record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Trigger {
    /// The kind of trigger (`schedule`, `user`, `webhook`, ...), from the configured kind key
    /// (default `stepline.trigger.kind`).
    #[serde(default)]
    pub kind: Option<String>,
    /// Every other attribute under the configured meta prefix (default `stepline.trigger.`),
    /// keyed without the prefix.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

impl Trigger {
    /// True when neither a kind nor any meta is known.
    pub fn is_empty(&self) -> bool {
        self.kind.is_none() && self.meta.is_empty()
    }
}

/// What one span says about who started its run and the run's configured attributes: stored
/// on the span's fact, merged into the run record by the fold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The trigger the span names.
    #[serde(default, skip_serializing_if = "Trigger::is_empty")]
    pub trigger: Trigger,
    /// The configured run attributes the span carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

impl RunInfo {
    /// True when the span says nothing.
    pub fn is_empty(&self) -> bool {
        self.trigger.is_empty() && self.attributes.is_empty()
    }

    /// Takes from `other` what this one lacks: the kind, meta keys (up to [`MAX_META_KEYS`])
    /// and attributes not set yet. Earlier values win.
    pub fn merge_missing(&mut self, other: &RunInfo) {
        if self.trigger.kind.is_none() {
            self.trigger.kind.clone_from(&other.trigger.kind);
        }
        for (k, v) in &other.trigger.meta {
            if self.trigger.meta.len() >= MAX_META_KEYS {
                break;
            }
            self.trigger
                .meta
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        for (k, v) in &other.attributes {
            self.attributes
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }

    /// True when `other` adds nothing to this one and contradicts none of it: every value it
    /// has is this one's value for the same key.
    pub fn covers(&self, other: &RunInfo) -> bool {
        other
            .trigger
            .kind
            .as_ref()
            .is_none_or(|k| self.trigger.kind.as_ref() == Some(k))
            && other
                .trigger
                .meta
                .iter()
                .all(|(k, v)| self.trigger.meta.get(k) == Some(v))
            && other
                .attributes
                .iter()
                .all(|(k, v)| self.attributes.get(k) == Some(v))
    }
}

/// The attribute keys a run's trigger and attributes come from
/// (`processors.stepline.trigger` and `processors.stepline.run_attributes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfoKeys {
    /// The key whose value is the trigger kind (`trigger.kind_key`).
    pub kind_key: String,
    /// Keys starting with it (other than `kind_key`) are trigger meta, without the prefix
    /// (`trigger.meta_prefix`); empty: no meta.
    pub meta_prefix: String,
    /// Keys copied onto the run's `attributes` (`run_attributes`).
    pub attributes: Vec<String>,
}

impl Default for RunInfoKeys {
    fn default() -> Self {
        Self {
            kind_key: DEFAULT_KIND_KEY.to_string(),
            meta_prefix: DEFAULT_META_PREFIX.to_string(),
            attributes: Vec::new(),
        }
    }
}

/// Why a configured key is refused, in words for the configuration error.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("must not be empty".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "must be at most {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        ));
    }
    if key.contains('\0') {
        return Err("must not contain a NUL character".into());
    }
    Ok(())
}

impl RunInfoKeys {
    /// What a span with `resource` and `span` attributes (key, text value) says; a span
    /// attribute wins over a resource attribute of the same key. Values over the budgets are
    /// left out and named in the warnings. Work is linear in the attributes given.
    pub fn extract<'a>(
        &self,
        resource: impl IntoIterator<Item = (&'a str, &'a str)>,
        span: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> (RunInfo, Vec<String>) {
        let mut info = RunInfo::default();
        let mut warnings = Vec::new();
        // Resource first, then the span's: a later value for a key replaces an earlier one.
        for (key, value) in resource.into_iter().chain(span) {
            self.take(&mut info, key, value, &mut warnings);
        }
        (info, warnings)
    }

    /// Files one attribute under the trigger or the run attributes, when a configured key
    /// names it.
    fn take(&self, info: &mut RunInfo, key: &str, value: &str, warnings: &mut Vec<String>) {
        let is_kind = key == self.kind_key;
        let meta = (!is_kind && !self.meta_prefix.is_empty())
            .then(|| key.strip_prefix(self.meta_prefix.as_str()))
            .flatten()
            .filter(|k| !k.is_empty());
        let attribute = self.attributes.iter().any(|a| a == key);
        if !is_kind && meta.is_none() && !attribute {
            return;
        }
        if value.len() > MAX_VALUE_BYTES || value.contains('\0') {
            if warnings.len() < MAX_META_KEYS {
                warnings.push(format!(
                    "attribute {:?} left out of the run's trigger and attributes: its value \
                     is over {MAX_VALUE_BYTES} bytes or holds a NUL character",
                    cut(key)
                ));
            }
            return;
        }
        if is_kind {
            info.trigger.kind = Some(value.to_string());
        }
        if let Some(k) = meta {
            let fits = info.trigger.meta.len() < MAX_META_KEYS || info.trigger.meta.contains_key(k);
            if k.len() <= MAX_KEY_BYTES && fits {
                info.trigger.meta.insert(k.to_string(), value.to_string());
            } else if warnings.len() < MAX_META_KEYS {
                warnings.push(format!(
                    "trigger meta {:?} left out: keys are kept up to {MAX_KEY_BYTES} bytes and \
                     {MAX_META_KEYS} per run",
                    cut(k)
                ));
            }
        }
        if attribute {
            info.attributes.insert(key.to_string(), value.to_string());
        }
    }
}

/// A key cut to [`MAX_KEY_BYTES`] (on a character boundary) for a warning.
fn cut(key: &str) -> &str {
    let mut end = key.len().min(MAX_KEY_BYTES);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(attributes: &[&str]) -> RunInfoKeys {
        RunInfoKeys {
            attributes: attributes.iter().map(|s| s.to_string()).collect(),
            ..RunInfoKeys::default()
        }
    }

    #[test]
    fn defaults_pick_the_kind_and_every_prefixed_key() {
        let (info, warnings) = keys(&["tenant"]).extract(
            [
                ("stepline.trigger.kind", "schedule"),
                ("stepline.trigger.job", "nightly"),
                ("tenant", "acme"),
                ("service.name", "x"),
            ],
            [],
        );
        assert!(warnings.is_empty());
        assert_eq!(info.trigger.kind.as_deref(), Some("schedule"));
        assert_eq!(
            info.trigger.meta,
            BTreeMap::from([("job".to_string(), "nightly".to_string())])
        );
        assert_eq!(
            info.attributes,
            BTreeMap::from([("tenant".to_string(), "acme".to_string())])
        );
    }

    #[test]
    fn a_span_attribute_wins_over_the_resource() {
        let (info, _) = keys(&["user"]).extract(
            [("user", "a"), ("stepline.trigger.kind", "schedule")],
            [("user", "b"), ("stepline.trigger.kind", "user")],
        );
        assert_eq!(info.attributes["user"], "b");
        assert_eq!(info.trigger.kind.as_deref(), Some("user"));
    }

    #[test]
    fn values_over_the_budget_are_left_out_with_a_warning() {
        let long = "x".repeat(MAX_VALUE_BYTES + 1);
        let many: Vec<(String, String)> = (0..MAX_META_KEYS + 10)
            .map(|i| (format!("stepline.trigger.k{i:03}"), "v".to_string()))
            .collect();
        let (info, warnings) = keys(&["tenant"]).extract(
            many.iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain([("tenant", long.as_str()), ("stepline.trigger.kind", "a\0b")]),
            [],
        );
        assert!(info.attributes.is_empty());
        assert_eq!(info.trigger.kind, None);
        assert_eq!(info.trigger.meta.len(), MAX_META_KEYS);
        assert!(!warnings.is_empty() && warnings.len() <= MAX_META_KEYS);
    }

    #[test]
    fn merging_keeps_earlier_values_and_covers_detects_news() {
        let (a, _) = keys(&["tenant"]).extract([("tenant", "acme")], []);
        let (b, _) =
            keys(&["tenant"]).extract([("tenant", "other"), ("stepline.trigger.kind", "user")], []);
        let mut merged = a.clone();
        merged.merge_missing(&b);
        assert_eq!(merged.attributes["tenant"], "acme");
        assert_eq!(merged.trigger.kind.as_deref(), Some("user"));
        assert!(!a.covers(&b));
        assert!(merged.covers(&a));
        assert!(merged.covers(&RunInfo::default()));
    }

    #[test]
    fn configured_keys_are_checked() {
        assert!(check_key("tenant").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a\0b").is_err());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
    }
}

//! `processors.stepline.limits` (the per-request and per-span caps, [`Limits`]) and
//! `processors.stepline.memory` (the byte budgets of the in-memory caches, [`CacheBudgets`]):
//! their YAML shape and their validation. Pure.

use serde::Deserialize;

use super::media::parse_size;
use super::text::Text;
use crate::limits::Limits;

/// `processors.stepline.limits`: every field of [`Limits`], each optional (default when absent).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    /// `max_spans_per_request`.
    pub(crate) max_spans_per_request: Option<u64>,
    /// `max_log_records_per_request`.
    pub(crate) max_log_records_per_request: Option<u64>,
    /// `max_metric_points_per_request`.
    pub(crate) max_metric_points_per_request: Option<u64>,
    /// `max_attributes_per_span`.
    pub(crate) max_attributes_per_span: Option<u64>,
    /// `max_events_per_span`.
    pub(crate) max_events_per_span: Option<u64>,
    /// `max_tool_calls_per_response`.
    pub(crate) max_tool_calls_per_response: Option<u64>,
    /// `max_attribute_key_bytes`: a size (`4096`, `4KiB`).
    pub(crate) max_attribute_key_bytes: Option<Text>,
    /// `max_attribute_value_bytes`: a size (`32MiB`).
    pub(crate) max_attribute_value_bytes: Option<Text>,
    /// `max_nesting_depth`.
    pub(crate) max_nesting_depth: Option<u64>,
}

/// The most nesting levels `max_nesting_depth` may allow: stored records wrap sender values in
/// a few levels of their own and must stay under serde_json's 128-level read limit.
pub const MAX_NESTING_DEPTH_CEILING: usize = 100;

/// Validates `processors.stepline.limits`; problems go to `problem(key under limits, message)`.
pub(crate) fn validate_limits(
    raw: Option<RawLimits>,
    problem: &mut impl FnMut(&str, String),
) -> Option<Limits> {
    let raw = raw.unwrap_or_default();
    let defaults = Limits::default();
    let mut valid = true;
    let mut count = |key: &str, value: Option<u64>, default: usize| -> usize {
        match value {
            None => default,
            Some(0) => {
                problem(key, "must be at least 1".into());
                valid = false;
                default
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    };
    let mut limits = Limits {
        max_spans_per_request: count(
            "max_spans_per_request",
            raw.max_spans_per_request,
            defaults.max_spans_per_request,
        ),
        max_log_records_per_request: count(
            "max_log_records_per_request",
            raw.max_log_records_per_request,
            defaults.max_log_records_per_request,
        ),
        max_metric_points_per_request: count(
            "max_metric_points_per_request",
            raw.max_metric_points_per_request,
            defaults.max_metric_points_per_request,
        ),
        max_attributes_per_span: count(
            "max_attributes_per_span",
            raw.max_attributes_per_span,
            defaults.max_attributes_per_span,
        ),
        max_events_per_span: count(
            "max_events_per_span",
            raw.max_events_per_span,
            defaults.max_events_per_span,
        ),
        max_tool_calls_per_response: count(
            "max_tool_calls_per_response",
            raw.max_tool_calls_per_response,
            defaults.max_tool_calls_per_response,
        ),
        max_nesting_depth: count(
            "max_nesting_depth",
            raw.max_nesting_depth,
            defaults.max_nesting_depth,
        ),
        ..defaults
    };
    if limits.max_nesting_depth > MAX_NESTING_DEPTH_CEILING {
        problem(
            "max_nesting_depth",
            format!(
                "must be at most {MAX_NESTING_DEPTH_CEILING} (stored records must stay under \
                 the 128-level JSON read limit), got {}",
                limits.max_nesting_depth
            ),
        );
        valid = false;
    }
    for (key, value, field) in [
        (
            "max_attribute_key_bytes",
            raw.max_attribute_key_bytes,
            &mut limits.max_attribute_key_bytes,
        ),
        (
            "max_attribute_value_bytes",
            raw.max_attribute_value_bytes,
            &mut limits.max_attribute_value_bytes,
        ),
    ] {
        match value.map(|Text(text)| parse_size(&text)) {
            None => {}
            Some(Ok(0)) => {
                problem(key, "must be at least 1 byte".into());
                valid = false;
            }
            Some(Ok(n)) => *field = usize::try_from(n).unwrap_or(usize::MAX),
            Some(Err(message)) => {
                problem(key, message);
                valid = false;
            }
        }
    }
    valid.then_some(limits)
}

/// Default for [`CacheBudgets::total`]: `processors.stepline.memory.cache_budget`. Sized with
/// RocksDB's budgets (48 MiB of memtables, a 16 MiB block cache) so that the process stays
/// under 150 MB under agent load; the hot entries of the runs being written and read fit
/// well within it.
pub const DEFAULT_CACHE_BUDGET: usize = 48 << 20;

/// The byte budgets of stepline's in-memory caches: one total split by fixed shares, each
/// share overridable. A cache's bytes are an estimate of what its entries hold (message bodies,
/// rendered answers, raw histories, ids), and no cache holds more than its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBudgets {
    /// `cache_budget`: the total the shares below are split from.
    pub total: usize,
    /// `history`: decoded histories of recently read snapshots (the store's history cache).
    pub history: usize,
    /// `rendered`: rendered continuation answers.
    pub rendered: usize,
    /// `context`: tool-effect ledgers and model requests of recently read runs.
    pub context: usize,
    /// `prefix_memo`: the interpreter's memo of the last input history per run.
    pub prefix_memo: usize,
    /// `chain`: node ids of the last stored input history per run.
    pub chain: usize,
}

/// Each cache's share of the total, in percent (they add up to 100).
const SHARES: [(&str, usize); 5] = [
    ("history", 40),
    ("rendered", 20),
    ("context", 15),
    ("prefix_memo", 15),
    ("chain", 10),
];

impl CacheBudgets {
    /// `total` split by the fixed shares.
    pub fn split(total: usize) -> Self {
        let share = |name: &str| {
            let percent = SHARES
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, p)| *p);
            total / 100 * percent + total % 100 * percent / 100
        };
        let (history, rendered, context, prefix_memo) = (
            share("history"),
            share("rendered"),
            share("context"),
            share("prefix_memo"),
        );
        Self {
            total,
            history,
            rendered,
            context,
            prefix_memo,
            // The rest, so the shares add up to the total.
            chain: total - history - rendered - context - prefix_memo,
        }
    }

    /// The budgets by cache name, as `/metrics` labels them.
    pub fn by_cache(&self) -> [(&'static str, usize); 5] {
        [
            ("history", self.history),
            ("rendered", self.rendered),
            ("context", self.context),
            ("prefix_memo", self.prefix_memo),
            ("chain", self.chain),
        ]
    }
}

impl Default for CacheBudgets {
    fn default() -> Self {
        Self::split(DEFAULT_CACHE_BUDGET)
    }
}

/// `processors.stepline.memory`: sizes (`48MiB`, bytes), each optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    /// `cache_budget`: the total.
    pub(crate) cache_budget: Option<Text>,
    /// `history`: overrides the history cache's share.
    pub(crate) history: Option<Text>,
    /// `rendered`: overrides the rendered-answer cache's share.
    pub(crate) rendered: Option<Text>,
    /// `context`: overrides the context cache's share.
    pub(crate) context: Option<Text>,
    /// `prefix_memo`: overrides the prefix memo's share.
    pub(crate) prefix_memo: Option<Text>,
    /// `chain`: overrides the chain cache's share.
    pub(crate) chain: Option<Text>,
}

/// Validates `processors.stepline.memory`; problems go to `problem(key under memory, message)`.
/// A budget may be 0 (that cache then holds nothing).
pub(crate) fn validate_memory(
    raw: Option<RawMemory>,
    problem: &mut impl FnMut(&str, String),
) -> Option<CacheBudgets> {
    let raw = raw.unwrap_or_default();
    let mut valid = true;
    let mut size = |key: &str, value: Option<Text>| -> Option<usize> {
        match parse_size(&value?.0) {
            Ok(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Err(message) => {
                problem(key, message);
                valid = false;
                None
            }
        }
    };
    let total = size("cache_budget", raw.cache_budget).unwrap_or(DEFAULT_CACHE_BUDGET);
    let mut budgets = CacheBudgets::split(total);
    for (key, value, field) in [
        ("history", raw.history, &mut budgets.history),
        ("rendered", raw.rendered, &mut budgets.rendered),
        ("context", raw.context, &mut budgets.context),
        ("prefix_memo", raw.prefix_memo, &mut budgets.prefix_memo),
        ("chain", raw.chain, &mut budgets.chain),
    ] {
        if let Some(bytes) = size(key, value) {
            *field = bytes;
        }
    }
    valid.then_some(budgets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw<T: for<'de> Deserialize<'de>>(yaml: &str) -> T {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        serde_path_to_error::deserialize(&value).unwrap()
    }

    fn outcome<V>(value: Option<V>, problems: Vec<String>) -> Result<V, Vec<String>> {
        match value {
            Some(v) if problems.is_empty() => Ok(v),
            _ => Err(problems),
        }
    }

    fn limits(yaml: &str) -> Result<Limits, Vec<String>> {
        let mut problems = Vec::new();
        let value = validate_limits(Some(raw(yaml)), &mut |k, m| {
            problems.push(format!("{k}: {m}"))
        });
        outcome(value, problems)
    }

    fn memory(yaml: &str) -> Result<CacheBudgets, Vec<String>> {
        let mut problems = Vec::new();
        let value = validate_memory(Some(raw(yaml)), &mut |k, m| {
            problems.push(format!("{k}: {m}"))
        });
        outcome(value, problems)
    }

    #[test]
    fn limits_default_and_override_each_field() {
        assert_eq!(limits("{}").unwrap(), Limits::default());
        let set = limits(
            "max_spans_per_request: 10\nmax_log_records_per_request: 11\n\
             max_metric_points_per_request: 12\nmax_attributes_per_span: 13\n\
             max_events_per_span: 14\nmax_tool_calls_per_response: 15\n\
             max_attribute_key_bytes: 1KiB\nmax_attribute_value_bytes: 2MiB\n\
             max_nesting_depth: 17\n",
        )
        .unwrap();
        assert_eq!(
            set,
            Limits {
                max_spans_per_request: 10,
                max_log_records_per_request: 11,
                max_metric_points_per_request: 12,
                max_attributes_per_span: 13,
                max_events_per_span: 14,
                max_tool_calls_per_response: 15,
                max_attribute_key_bytes: 1024,
                max_attribute_value_bytes: 2 << 20,
                max_nesting_depth: 17,
            }
        );
    }

    #[test]
    fn limits_refuse_zero_and_nonsense() {
        let problems = limits(
            "max_spans_per_request: 0\nmax_attribute_value_bytes: lots\nmax_nesting_depth: 500\n",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("max_spans_per_request: must be at least 1"));
        assert!(problems
            .iter()
            .any(|p| p.starts_with("max_nesting_depth: must be at most")));
        assert!(problems
            .iter()
            .any(|p| p.starts_with("max_attribute_value_bytes: invalid size")));
    }

    #[test]
    fn memory_splits_the_total_and_takes_overrides() {
        let default = memory("{}").unwrap();
        assert_eq!(default, CacheBudgets::default());
        assert_eq!(default.total, 48 << 20);
        let sum: usize = default.by_cache().iter().map(|(_, b)| b).sum();
        assert_eq!(sum, default.total);
        let set = memory("cache_budget: 100MiB\nhistory: 1MiB\nchain: 0\n").unwrap();
        assert_eq!(set.total, 100 << 20);
        assert_eq!(set.history, 1 << 20);
        assert_eq!(set.chain, 0);
        assert_eq!(set.rendered, (100 << 20) / 5);
        assert!(memory("cache_budget: huge\n").is_err());
    }
}

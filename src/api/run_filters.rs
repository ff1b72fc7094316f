//! The `GET /v1/runs` filters that are not plain equalities on one field:
//! `attr.<key>=<value>` (the run's configured attributes, AND-combined) and
//! `min_tool_calls=N`. Every key, value and count in them is the caller's: each has a budget.

use std::collections::HashMap;

use super::error::ApiError;
use crate::domain::trigger::{MAX_KEY_BYTES, MAX_RUN_ATTRIBUTES, MAX_VALUE_BYTES};

/// The prefix of an attribute filter's parameter name.
pub const ATTR_PREFIX: &str = "attr.";

/// True for an `attr.<key>` parameter.
pub fn is_attribute(name: &str) -> bool {
    name.starts_with(ATTR_PREFIX)
}

/// The `attr.<key>=<value>` filters, sorted by key: at most [`MAX_RUN_ATTRIBUTES`], keys of
/// 1 to [`MAX_KEY_BYTES`] bytes and values of at most [`MAX_VALUE_BYTES`] (no run can hold
/// more).
pub fn attributes(params: &HashMap<String, String>) -> Result<Vec<(String, String)>, ApiError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in params {
        let Some(key) = name.strip_prefix(ATTR_PREFIX) else {
            continue;
        };
        if out.len() == MAX_RUN_ATTRIBUTES {
            return Err(ApiError::BadRequest(format!(
                "at most {MAX_RUN_ATTRIBUTES} attr.<key> filters are allowed"
            )));
        }
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(ApiError::BadRequest(format!(
                "attr.<key> needs a key of 1 to {MAX_KEY_BYTES} bytes"
            )));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(ApiError::BadRequest(format!(
                "the value of attr.{key} is over {MAX_VALUE_BYTES} bytes; no run attribute is \
                 that long"
            )));
        }
        out.push((key.to_string(), value.clone()));
    }
    out.sort();
    Ok(out)
}

/// `min_tool_calls=N`, N a whole number.
pub fn min_tool_calls(params: &HashMap<String, String>) -> Result<Option<u32>, ApiError> {
    params
        .get("min_tool_calls")
        .map(|n| {
            n.parse::<u32>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "min_tool_calls must be a whole number from 0 to {}, not {n:?}",
                    u32::MAX
                ))
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn attribute_filters_are_read_sorted_and_bounded() {
        let got = attributes(&params(&[
            ("attr.tenant", "acme"),
            ("attr.env", "prod"),
            ("limit", "3"),
        ]))
        .unwrap();
        assert_eq!(
            got,
            [
                ("env".to_string(), "prod".to_string()),
                ("tenant".to_string(), "acme".to_string())
            ]
        );
        assert!(attributes(&params(&[("attr.", "x")])).is_err());
        let long = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(attributes(&params(&[("attr.k", &long)])).is_err());
        let many: Vec<(String, String)> = (0..=MAX_RUN_ATTRIBUTES)
            .map(|i| (format!("attr.k{i}"), "v".to_string()))
            .collect();
        assert!(attributes(&many.into_iter().collect()).is_err());
    }

    #[test]
    fn min_tool_calls_is_a_count() {
        assert_eq!(min_tool_calls(&params(&[])).unwrap(), None);
        assert_eq!(
            min_tool_calls(&params(&[("min_tool_calls", "2")])).unwrap(),
            Some(2)
        );
        assert!(min_tool_calls(&params(&[("min_tool_calls", "-1")])).is_err());
        assert!(min_tool_calls(&params(&[("min_tool_calls", "many")])).is_err());
    }
}

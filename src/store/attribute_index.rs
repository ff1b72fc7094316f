//! The run-attribute index: one `RUN_INDEX` key per attribute on a run record
//! (`processors.stepline.run_attributes`), so `GET /v1/runs?attr.<key>=<value>` scans only the
//! runs that have that value.
//!
//! A key is `x \0 <key length, be32> <key> <value> \0 <position>`: the length makes the split
//! between key and value unambiguous whatever bytes they hold, and values never hold a NUL (the
//! interpreter leaves such values out), so one value's prefix never holds another's keys.

use crate::domain::Run;

/// The tag of the attribute index.
const TAG: u8 = b'x';

/// The prefix of the runs whose attribute `key` is `value`.
pub fn attribute_prefix(key: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + value.len() + 7);
    k.extend_from_slice(&[TAG, 0]);
    k.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// The attribute index keys of `run`, at index `position`.
pub fn attribute_keys<'a>(run: &'a Run, position: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
    run.attributes.iter().map(move |(k, v)| {
        let mut key = attribute_prefix(k, v);
        key.extend_from_slice(position);
        key
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::RunStatus;
    use crate::store::keys::{cf, index_keys};
    use crate::store::runs::SCANNED_PER_PAGE;
    use crate::store::{RunFilter, Store, WrittenRun};

    fn run(id: &str, started_ns: u64, tenant: Option<&str>, tool_calls: u32) -> Run {
        Run {
            run_id: id.into(),
            aliases: Vec::new(),
            trace_id: "t".repeat(32),
            agent_name: None,
            conversation_id: None,
            parent_run_id: None,
            status: RunStatus::Completed,
            started_at: crate::domain::format_timestamp(started_ns),
            ended_at: None,
            error: None,
            model_request_count: 0,
            tool_call_count: tool_calls,
            snapshot_count: 0,
            event_count: 0,
            input_tokens: 0,
            output_tokens: 0,
            continuation_unavailable: None,
            warnings: Vec::new(),
            started_ns,
            trigger: None,
            attributes: tenant
                .map(|t| [("tenant".to_string(), t.to_string())].into())
                .unwrap_or_default(),
            tool_time_ms: 0,
            model_time_ms: 0,
            tool_calls_by_status: Default::default(),
            continued_from: None,
            resumed_by_run_id: None,
        }
    }

    fn store_of(runs: &[Run]) -> Store {
        let store = Store::in_memory();
        let mut batch = store.batch();
        for r in runs {
            batch.put_json(cf::RUNS, r.run_id.as_bytes(), r).unwrap();
            for key in index_keys(r) {
                batch.put_raw(cf::RUN_INDEX, &key, b"").unwrap();
            }
        }
        let ids: Vec<_> = runs.iter().map(|r| WrittenRun::of(&r.run_id)).collect();
        store.commit_runs(batch, &ids).unwrap();
        store
    }

    /// Every page of `filter`, `limit` runs at most each: the ids per page.
    fn pages(store: &Store, filter: &RunFilter, limit: usize) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let (runs, next) = store.list_runs(filter, cursor.as_deref(), limit).unwrap();
            out.push(runs.into_iter().map(|r| r.run_id).collect());
            match next {
                Some(c) => cursor = Some(c),
                None => return out,
            }
        }
    }

    fn filter(attributes: &[(&str, &str)], min_tool_calls: Option<u32>) -> RunFilter {
        RunFilter {
            attributes: attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            min_tool_calls,
            ..RunFilter::default()
        }
    }

    #[test]
    fn attribute_filters_page_through_their_index() {
        let store = store_of(&[
            run("r1", 10, Some("acme"), 2),
            run("r2", 20, Some("acme"), 0),
            run("r3", 30, Some("globex"), 5),
            run("r4", 40, None, 1),
            run("r5", 50, Some("acme"), 3),
        ]);
        let acme = filter(&[("tenant", "acme")], None);
        assert_eq!(pages(&store, &acme, 2), [vec!["r1", "r2"], vec!["r5"]]);
        assert_eq!(
            pages(&store, &filter(&[("tenant", "acme")], Some(1)), 100),
            [vec!["r1", "r5"]]
        );
        assert_eq!(
            pages(&store, &filter(&[("tenant", "acm")], None), 100),
            [Vec::<String>::new()]
        );
        assert_eq!(
            pages(
                &store,
                &filter(&[("tenant", "acme"), ("env", "prod")], None),
                100
            ),
            [Vec::<String>::new()]
        );
        assert_eq!(
            pages(&store, &filter(&[], Some(3)), 100),
            [vec!["r3", "r5"]]
        );
    }

    #[test]
    fn min_tool_calls_reads_a_bounded_number_of_entries_per_page() {
        let mut runs: Vec<Run> = (0..SCANNED_PER_PAGE as u64 + 5)
            .map(|i| run(&format!("q{i:06}"), 100 + i, None, 0))
            .collect();
        runs.push(run("last", u64::MAX / 2, None, 4));
        let store = store_of(&runs);
        // The first page reads its budget and finds nothing; the next one goes on from there.
        let got = pages(&store, &filter(&[], Some(1)), 10);
        assert_eq!(got, [vec![], vec!["last".to_string()]]);
        // Without the filter, pages are full as before.
        let (all, next) = store.list_runs(&RunFilter::default(), None, 10).unwrap();
        assert_eq!(all.len(), 10);
        assert!(next.is_some());
    }

    #[test]
    fn prefixes_split_key_and_value_unambiguously() {
        assert_ne!(attribute_prefix("ab", "c"), attribute_prefix("a", "bc"));
        assert!(!attribute_prefix("a", "bc").starts_with(&attribute_prefix("a", "b")));
    }
}

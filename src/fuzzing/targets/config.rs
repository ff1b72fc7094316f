//! `config`: configuration text — `Config::from_yaml` (YAML, merge keys, `${env:…}`
//! substitution, validation) with environment values taken from the input, `expand_env` on
//! its own, and listen-endpoint parsing.
//!
//! Input: byte 0 odd → the rest is an endpoint; even → the rest is YAML, then after a NUL byte
//! the values of the environment (NUL-separated; which variable gets which value, or none, is
//! decided by the variable's name).
//!
//! Invariants: no panic; an accepted endpoint is returned unchanged, and one whose host is an
//! IP address is a socket address; substitution is not recursive (a variable's value that
//! holds a reference is kept as written).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use crate::config::endpoint::parse_endpoint;
use crate::config::expand::expand_env;
use crate::config::Config;
use crate::fuzzing::engine::{note, Target};

/// The target.
pub const TARGET: Target = Target {
    name: "config",
    about: "config::from_yaml with env substitution, config::expand, config::endpoint",
    run,
    max_len: 16 * 1024,
    scale: crate::fuzzing::engine::repeat_bytes,
    probes: crate::fuzzing::engine::no_probes,
    seeds,
};

fn endpoint(text: &str) {
    match parse_endpoint(text) {
        Ok(out) => {
            note("endpoint ok");
            assert!(out == text, "an accepted endpoint is changed");
            let host = text
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or_default();
            if host.parse::<IpAddr>().is_ok() {
                assert!(
                    text.parse::<SocketAddr>().is_ok(),
                    "endpoint {text:?} is accepted but is not a socket address"
                );
            }
        }
        // The kind of error, without the endpoint text it quotes.
        Err(e) => note((
            "endpoint error",
            e.split(['"', ':', ';'])
                .next()
                .unwrap_or_default()
                .to_string(),
            e.rsplit(['"', ';']).next().unwrap_or_default().len(),
        )),
    }
}

fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if mode & 1 == 1 {
        endpoint(&text);
        return;
    }
    let mut pieces = text.split('\0');
    let yaml = pieces.next().unwrap_or_default();
    let values: Vec<String> = pieces.map(str::to_string).collect();
    let env = |name: &str| -> Option<String> {
        let h = name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        values.get(h % (values.len() + 1)).cloned()
    };
    match Config::from_yaml(yaml, Path::new("fuzz.yaml"), &env) {
        Ok(_) => note("config ok"),
        Err(e) => {
            let text = e.to_string();
            note(("config error", text.lines().count().min(8)));
            note(("invalid YAML", text.contains("invalid YAML")));
        }
    }
    // Substitution alone, with values that themselves look like references: they are kept
    // as written, never looked up.
    if let Ok(mut root) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml) {
        let looked_up_nested = std::cell::Cell::new(false);
        let nested = |name: &str| {
            if name == "NESTED" {
                looked_up_nested.set(true);
            }
            Some("${env:NESTED}$$".to_string())
        };
        let problems = expand_env(&mut root, &nested, Path::new("fuzz.yaml"));
        note(("expand", problems.len().min(4)));
        assert!(
            !looked_up_nested.get() || yaml.contains("NESTED"),
            "a substituted value was expanded again"
        );
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for file in [
        "collector.yaml",
        "config/all-options.yaml",
        "config/env-overrides.yaml",
        "config/media-s3.yaml",
        "config/minimal.yaml",
    ] {
        if let Ok(text) = std::fs::read(root.join(file)) {
            out.push(
                [
                    vec![0],
                    text,
                    b"\x00tok\x00127.0.0.1:4317\x00true\x0010s".to_vec(),
                ]
                .concat(),
            );
        }
    }
    for e in [
        "127.0.0.1:4317",
        "[::1]:4318",
        "0.0.0.0:0",
        "localhost:65535",
        "[fe80::1%eth0]:1",
    ] {
        out.push([vec![1], e.as_bytes().to_vec()].concat());
    }
    out.push(b"\x00a: ${env:A:-x}\nb: $${env:B}\nc: *x\n<<: {d: 1}\n".to_vec());
    out
}

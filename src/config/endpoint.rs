//! Listen endpoints as written in the config: `host:port`, IPv6 hosts in brackets.
//!
//! Validation is purely syntactic; the caller binds the endpoint, which resolves host names.

const HINT: &str = "expected host:port, e.g. 127.0.0.1:4317, 0.0.0.0:4317 or [::1]:4317";

/// Checks that `text` is `host:port` (port 0..=65535, host non-empty, IPv6 in brackets) and
/// returns it unchanged. Returns a message on error.
pub(crate) fn parse_endpoint(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err(format!("empty endpoint; {HINT}"));
    }
    if text.contains("://") {
        return Err(format!(
            "invalid endpoint {text:?}: write host:port without a scheme; {HINT}"
        ));
    }
    if text.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(format!("invalid endpoint {text:?}: {HINT}"));
    }
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("invalid endpoint {text:?}: missing ']'; {HINT}"))?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!(
                "invalid endpoint {text:?}: {host:?} in brackets is not an IPv6 address"
            ));
        }
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| format!("invalid endpoint {text:?}: missing :port; {HINT}"))?;
        (host, port)
    } else {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid endpoint {text:?}: missing :port; {HINT}"))?;
        if host.contains(':') {
            return Err(format!(
                "invalid endpoint {text:?}: put an IPv6 address in brackets, e.g. [::1]:4317"
            ));
        }
        if host.contains(['[', ']']) {
            return Err(format!(
                "invalid endpoint {text:?}: brackets go around a whole IPv6 host, e.g. [::1]:4317"
            ));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(format!(
            "invalid endpoint {text:?}: missing host (use 0.0.0.0 to listen on every interface); {HINT}"
        ));
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(format!(
            "invalid endpoint {text:?}: port {port:?} is not a number from 0 to 65535"
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_host_port_forms() {
        for ok in [
            "127.0.0.1:4317",
            "0.0.0.0:0",
            "localhost:65535",
            "[::1]:4317",
            "[::]:4318",
            "collector.internal:4320",
        ] {
            assert_eq!(parse_endpoint(ok).unwrap(), ok);
        }
    }

    #[test]
    fn rejects_malformed_endpoints() {
        let cases = [
            ("", "empty endpoint"),
            ("localhost", "missing :port"),
            (":4317", "missing host"),
            ("127.0.0.1:", "is not a number"),
            ("127.0.0.1:65536", "is not a number"),
            ("127.0.0.1:http", "is not a number"),
            ("::1:4317", "brackets"),
            ("[::1]4317", "missing :port"),
            ("[::1:4317", "missing ']'"),
            ("[nothost]:4317", "not an IPv6 address"),
            ("http://127.0.0.1:4317", "without a scheme"),
            ("127.0.0.1 :4317", "expected host:port"),
            ("0.0.0.0]:0", "brackets go around a whole IPv6 host"),
        ];
        for (text, expected) in cases {
            let message = parse_endpoint(text).unwrap_err();
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }
}

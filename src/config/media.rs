//! `extensions.stepline_storage.media`: where large binary message parts go, and from what size.
//!
//! Pure: the URL is parsed and the option keys are checked against the object store's own key
//! names, so a typo stops the start (and `--validate-config`) with its path; building the store
//! (credentials, network) is left to the caller.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use object_store::aws::AmazonS3ConfigKey;
use object_store::azure::AzureConfigKey;
use object_store::gcp::GoogleConfigKey;

use super::model::{
    MediaConfig, MediaLocation, DEFAULT_MEDIA_MAX_INLINE_BYTES, DEFAULT_MEDIA_THRESHOLD,
};
use super::raw::{RawMedia, Text};

/// The URL schemes `url` accepts, for messages.
const SCHEMES: &str = "file://<directory>, s3://<bucket>[/<prefix>], gs://<bucket>[/<prefix>], \
                       az://<container>[/<prefix>] or memory://";

/// Validates the `media` block of a storage extension whose RocksDB directory is `directory`.
/// Problems are reported through `problem(key under media, message)`.
pub(crate) fn validate_media(
    raw: Option<RawMedia>,
    directory: &Path,
    problem: &mut impl FnMut(&str, String),
) -> Option<MediaConfig> {
    let raw = raw.unwrap_or_default();
    let mut valid = true;
    let threshold = match raw.threshold {
        None => DEFAULT_MEDIA_THRESHOLD,
        Some(Text(text)) => match parse_size(&text) {
            Ok(0) => {
                problem(
                    "threshold",
                    "must be at least 1 byte (set enabled: false to keep every blob inline)".into(),
                );
                valid = false;
                0
            }
            Ok(n) => n,
            Err(message) => {
                problem("threshold", message);
                valid = false;
                0
            }
        },
    };
    let location = match raw.url {
        None => Some(MediaLocation::Directory(directory.join("media"))),
        Some(Text(url)) if url.trim().is_empty() => {
            Some(MediaLocation::Directory(directory.join("media")))
        }
        Some(Text(url)) => match parse_location(url.trim()) {
            Ok(location) => Some(location),
            Err(message) => {
                problem("url", message);
                None
            }
        },
    };
    let mut options = BTreeMap::new();
    for (key, value) in raw.options.unwrap_or_default() {
        // Empty (e.g. an unset environment variable): not given.
        let Some(Text(value)) = value.filter(|Text(v)| !v.is_empty()) else {
            continue;
        };
        if let Some(location) = &location {
            if let Err(message) = check_option(location, &key) {
                problem(&format!("options.{key}"), message);
                valid = false;
                continue;
            }
        }
        options.insert(key, value);
    }
    let location = location?;
    let max_inline_bytes = match raw.max_inline_bytes {
        None => DEFAULT_MEDIA_MAX_INLINE_BYTES,
        Some(Text(text)) => match parse_size(&text) {
            Ok(n) => n,
            Err(message) => {
                problem("max_inline_bytes", message);
                valid = false;
                0
            }
        },
    };
    valid.then_some(MediaConfig {
        threshold: raw.enabled.unwrap_or(true).then_some(threshold),
        location,
        options,
        max_inline_bytes,
    })
}

/// Parses `url` into a location.
fn parse_location(url: &str) -> Result<MediaLocation, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("{url:?} is not a URL; use {SCHEMES}"));
    };
    let (container, prefix) = match rest.split_once('/') {
        Some((c, p)) => (c.to_owned(), p.trim_matches('/').to_owned()),
        None => (rest.to_owned(), String::new()),
    };
    let need_container = |what: &str| {
        if container.is_empty() {
            Err(format!(
                "{url:?} names no {what}; use {scheme}://<{what}>[/<prefix>]"
            ))
        } else {
            Ok(())
        }
    };
    match scheme {
        "file" if rest.is_empty() => Err(format!(
            "{url:?} names no directory; use file:///absolute/path or file://relative/path"
        )),
        "file" => Ok(MediaLocation::Directory(rest.into())),
        "memory" if rest.trim_matches('/').is_empty() => Ok(MediaLocation::Memory),
        "memory" => Err(format!("{url:?}: memory:// takes no bucket or path")),
        "s3" | "s3a" => need_container("bucket").map(|()| MediaLocation::S3 {
            bucket: container,
            prefix,
        }),
        "gs" => need_container("bucket").map(|()| MediaLocation::Gcs {
            bucket: container,
            prefix,
        }),
        "az" | "azure" => {
            need_container("container").map(|()| MediaLocation::Azure { container, prefix })
        }
        other => Err(format!("unsupported scheme {other:?}; use {SCHEMES}")),
    }
}

/// Checks that `key` is an option the store at `location` knows.
fn check_option(location: &MediaLocation, key: &str) -> Result<(), String> {
    let known = match location {
        MediaLocation::S3 { .. } => AmazonS3ConfigKey::from_str(key).is_ok(),
        MediaLocation::Gcs { .. } => GoogleConfigKey::from_str(key).is_ok(),
        MediaLocation::Azure { .. } => AzureConfigKey::from_str(key).is_ok(),
        MediaLocation::Directory(_) | MediaLocation::Memory => {
            return Err(format!(
                "{} takes no options (they apply to s3://, gs:// and az:// URLs)",
                location.scheme()
            ))
        }
    };
    if known {
        Ok(())
    } else {
        Err(format!(
            "unknown option {key:?} for {}; see the object_store crate's configuration keys \
             (e.g. endpoint, region, allow_http, access_key_id)",
            location.scheme()
        ))
    }
}

/// Parses a byte size: a whole number of bytes, optionally followed by a unit `B`, `KB`, `KiB`,
/// `MB`, `MiB`, `GB` or `GiB` (any case; KB = 1000, KiB = 1024).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let hint = "use a whole number of bytes or a unit, e.g. 65536, 64KiB or 1MiB";
    let number: u64 = number
        .parse()
        .map_err(|_| format!("invalid size {text:?}; {hint}"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1 << 10,
        "mb" => 1000 * 1000,
        "mib" => 1 << 20,
        "gb" => 1000 * 1000 * 1000,
        "gib" => 1 << 30,
        other => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {other:?}; {hint}"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(yaml: &str) -> Result<MediaConfig, Vec<String>> {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let raw: RawMedia = serde_path_to_error::deserialize(&value).unwrap();
        let mut problems = Vec::new();
        let config = validate_media(Some(raw), Path::new("data"), &mut |k, m| {
            problems.push(format!("{k}: {m}"))
        });
        match config {
            Some(c) if problems.is_empty() => Ok(c),
            _ => Err(problems),
        }
    }

    #[test]
    fn defaults_are_a_directory_under_the_store_and_64_kib() {
        let config = validate("{}").unwrap();
        assert_eq!(config.threshold, Some(64 * 1024));
        assert_eq!(
            config.location,
            MediaLocation::Directory(Path::new("data").join("media"))
        );
        assert_eq!(validate("enabled: false").unwrap().threshold, None);
    }

    #[test]
    fn urls_and_options() {
        let config = validate(
            "url: s3://bucket/some/prefix/\nthreshold: 1MiB\noptions: {endpoint: http://localhost:9000, allow_http: true, region: us-east-1}",
        )
        .unwrap();
        assert_eq!(
            config.location,
            MediaLocation::S3 {
                bucket: "bucket".into(),
                prefix: "some/prefix".into()
            }
        );
        assert_eq!(config.threshold, Some(1 << 20));
        assert_eq!(config.options["allow_http"], "true");
        let unset =
            validate("url: s3://b\noptions: {endpoint: '', token: ~, region: eu-west-1}").unwrap();
        assert_eq!(unset.options.len(), 1, "an empty value is not given");
        assert_eq!(config.location.to_string(), "s3://bucket/some/prefix");
        assert_eq!(
            validate("url: memory://").unwrap().location,
            MediaLocation::Memory
        );
        assert_eq!(
            validate("url: file:///var/media").unwrap().location,
            MediaLocation::Directory("/var/media".into())
        );
        assert!(matches!(
            validate("url: gs://b").unwrap().location,
            MediaLocation::Gcs { .. }
        ));
        assert!(matches!(
            validate("url: az://c/p").unwrap().location,
            MediaLocation::Azure { .. }
        ));
    }

    #[test]
    fn problems_name_their_key() {
        let problems = validate(
            "url: s3://b\nthreshold: 64 parsecs\noptions: {endpiont: x, region: eu-west-1}",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("threshold: invalid size"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("options.endpiont: unknown option \"endpiont\" for s3://"),
            "{problems:?}"
        );
        let problems = validate("url: ftp://x").unwrap_err();
        assert!(
            problems[0].contains("unsupported scheme \"ftp\""),
            "{problems:?}"
        );
        let problems = validate("url: s3://").unwrap_err();
        assert!(problems[0].contains("names no bucket"), "{problems:?}");
        let problems = validate("url: memory://\noptions: {region: x}").unwrap_err();
        assert!(
            problems[0].contains("memory:// takes no options"),
            "{problems:?}"
        );
        let problems = validate("threshold: 0").unwrap_err();
        assert!(problems[0].contains("at least 1 byte"), "{problems:?}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64 kb"), Ok(64000));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("").is_err());
    }
}

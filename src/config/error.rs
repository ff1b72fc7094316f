//! The configuration error: every problem found in one file, each with its key path.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// One problem found in a configuration file, located by its key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted key path, e.g. `receivers.otlp.protocols.grpc.endpoint`; empty for the whole file.
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl ConfigProblem {
    /// A problem at `path` (dotted key path; empty for the whole file).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Why a configuration could not be loaded.
///
/// `Display` lists every problem, one per line, each prefixed by the file path, e.g.
/// `collector.yaml: service.pipelines.traces: references receiver "x" which is not configured`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the configuration file: {source}", .file.display())]
    Read {
        /// The file that was asked for.
        file: PathBuf,
        /// The I/O error (shared so the error stays `Clone`).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The file was read but is not a valid configuration.
    #[error("{}", render_problems(.file, .problems))]
    Invalid {
        /// The file the problems were found in.
        file: PathBuf,
        /// Every problem found, in file order as far as possible. Never empty.
        problems: Vec<ConfigProblem>,
    },
}

impl ConfigError {
    /// The problems found (empty for [`ConfigError::Read`]).
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            Self::Read { .. } => &[],
            Self::Invalid { problems, .. } => problems,
        }
    }
}

fn render_problems(file: &std::path::Path, problems: &[ConfigProblem]) -> String {
    let file = file.display();
    problems
        .iter()
        .map(|problem| format!("{file}: {problem}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_every_problem_prefixed_by_the_file() {
        let error = ConfigError::Invalid {
            file: PathBuf::from("collector.yaml"),
            problems: vec![
                ConfigProblem::new("a.b", "first"),
                ConfigProblem::new("", "second"),
            ],
        };
        assert_eq!(
            error.to_string(),
            "collector.yaml: a.b: first\ncollector.yaml: second"
        );
        assert_eq!(error.problems().len(), 2);
    }

    #[test]
    fn read_error_names_the_file() {
        let error = ConfigError::Read {
            file: PathBuf::from("/nope/collector.yaml"),
            source: Arc::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        assert!(error
            .to_string()
            .starts_with("/nope/collector.yaml: cannot read"));
        assert!(error.problems().is_empty());
    }
}

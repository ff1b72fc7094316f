//! Resolving each OTLP receiver protocol's `auth.authenticator` against the configured
//! `bearertokenauth` extensions (after both are validated on their own).

use super::auth::BearerTokenAuth;
use super::error::ConfigProblem;
use super::model::OtlpReceiverConfig;

/// Fills in each receiver protocol's authenticator from the `bearertokenauth` extensions
/// (`available`: id and settings, `None` when the extension itself did not validate), which
/// must be listed in `service.extensions` (`listed`). `false` when one could not be resolved.
pub(crate) fn resolve_authenticators(
    receiver_id: &str,
    receiver: &mut OtlpReceiverConfig,
    available: &[(&str, Option<&BearerTokenAuth>)],
    listed: &[String],
    problems: &mut Vec<ConfigProblem>,
) -> bool {
    let mut resolved = true;
    let protocols = [
        ("grpc", receiver.grpc.as_mut().and_then(|g| g.auth.as_mut())),
        ("http", receiver.http.as_mut().and_then(|h| h.auth.as_mut())),
    ];
    for (protocol, auth) in protocols {
        let Some(auth) = auth else { continue };
        let key = format!("receivers.{receiver_id}.protocols.{protocol}.auth.authenticator");
        let id = auth.authenticator.as_str();
        match available.iter().find(|(candidate, _)| *candidate == id) {
            None => {
                problems.push(ConfigProblem::new(
                    key,
                    format!(
                        "extension \"{id}\" is not configured: add it under extensions (e.g. \
                         {id}: {{ token: ${{env:OTLP_TOKEN}} }}) and list it in \
                         service.extensions"
                    ),
                ));
                resolved = false;
            }
            Some((_, None)) => resolved = false,
            Some((_, Some(_))) if !listed.iter().any(|l| l == id) => {
                problems.push(ConfigProblem::new(
                    key,
                    format!(
                        "extension \"{id}\" is configured but not listed in service.extensions; \
                         add it there"
                    ),
                ));
                resolved = false;
            }
            Some((_, Some(settings))) => {
                settings.fill(auth);
            }
        }
    }
    resolved
}

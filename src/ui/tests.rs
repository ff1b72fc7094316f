//! The explorer's routes inside the real API router: assets without a token, data with one,
//! the `Host` check on both, and every file the page refers to embedded.

use std::sync::Arc;

use axum::body::Body;
use axum::Router;
use tower::ServiceExt;

use super::ASSETS;
use crate::api::{router, ApiAccess, ApiState};
use crate::continuation::{Continuations, Format};
use crate::ingest::Ingest;
use crate::media::Media;
use crate::store::Store;

fn app(access: ApiAccess) -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), false).unwrap());
    let ingest = Arc::new(Ingest::new(
        store.clone(),
        Arc::new(crate::exporter::Outbox::disabled()),
    ));
    let state = ApiState {
        ingest,
        access: Arc::new(access),
        continuations: Arc::new(Continuations::new(
            store.clone(),
            Arc::new(Media::in_memory(Some(64 * 1024))),
        )),
        store,
    };
    (router(state), dir)
}

/// Status, headers and body of `GET uri` with the given headers.
async fn get(app: &Router, uri: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, String) {
    let mut request = http::Request::builder().uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

const LOCAL: (&str, &str) = ("host", "127.0.0.1:4320");

#[tokio::test]
async fn assets_need_no_token_but_data_does() {
    let (app, _dir) = app(ApiAccess::open().with_token("s3cret").with_host_check(&[]));
    let (status, headers, body) = get(&app, "/ui/", &[LOCAL]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<script type=\"module\" src=\"app.js\"></script>"),
        "{body}"
    );
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    for asset in ASSETS {
        let (status, headers, body) = get(&app, &format!("/ui/{}", asset.name), &[LOCAL]).await;
        assert_eq!(status, 200, "{}", asset.name);
        assert_eq!(
            headers["content-type"], asset.content_type,
            "{}",
            asset.name
        );
        assert_eq!(body, asset.body, "{}", asset.name);
    }
    let (status, _, body) = get(&app, "/ui/formats.json", &[LOCAL]).await;
    assert_eq!(status, 200);
    let formats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(formats["formats"], serde_json::json!(Format::NAMES));
    // The data behind the page still needs the token.
    assert_eq!(get(&app, "/v1/runs", &[LOCAL]).await.0, 401);
    let bearer = ("authorization", "Bearer s3cret");
    assert_eq!(get(&app, "/v1/runs", &[LOCAL, bearer]).await.0, 200);
}

#[tokio::test]
async fn redirects_refuses_unknown_files_and_foreign_hosts() {
    let (app, _dir) = app(ApiAccess::open().with_host_check(&[]));
    let (status, headers, _) = get(&app, "/ui", &[LOCAL]).await;
    assert_eq!(status, 308);
    assert_eq!(headers["location"], "/ui/");
    for uri in [
        "/ui/nope.js",
        "/ui/..%2fCargo.toml",
        "/ui/%2e%2e",
        "/ui/a/b.js",
        "/ui/%ff",
    ] {
        let (status, _, body) = get(&app, uri, &[LOCAL]).await;
        assert_eq!(status, 404, "{uri}: {body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(!body["error"].as_str().unwrap().is_empty(), "{uri}");
    }
    // A page on a name re-pointed at the loopback address gets nothing (DNS rebinding).
    let (status, _, _) = get(&app, "/ui/", &[("host", "rebound.evil.example")]).await;
    assert_eq!(status, 403);
}

/// Every `src`/`href` of the page and every relative `import` of its modules is an embedded
/// file, so a file added under `ui/` but not to [`ASSETS`] fails here, not in a browser.
#[test]
fn every_referenced_file_is_embedded() {
    let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
    let mut referenced = Vec::new();
    for asset in ASSETS {
        for marker in ["src=\"", "href=\"", "from \"./", "import(\"./"] {
            let mut rest = asset.body;
            while let Some(at) = rest.find(marker) {
                rest = &rest[at + marker.len()..];
                let end = rest.find('"').unwrap_or(rest.len());
                let target = rest[..end].trim_start_matches("./");
                if !target.starts_with('#') && !target.contains(':') && !target.is_empty() {
                    referenced.push((asset.name, target.to_owned()));
                }
            }
        }
    }
    assert!(referenced.len() >= ASSETS.len() - 1, "{referenced:?}");
    for (from, target) in referenced {
        assert!(
            names.contains(&target.as_str()),
            "{from} refers to {target}, which is not embedded"
        );
    }
}

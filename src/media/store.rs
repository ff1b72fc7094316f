//! Opening the object store a [`MediaConfig`] names.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, RetryConfig};

use crate::config::{MediaConfig, MediaLocation};

/// Retries of a remote store: few and short, because an OTLP client waits for the upload (it
/// retries the whole request itself after a 503).
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(15),
        ..RetryConfig::default()
    }
}

/// Builds the store. A local directory is created when missing, and fsyncs every blob when
/// `sync` (the storage `sync` setting) is on. Remote stores take their settings from the
/// environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), then from the config's options.
pub(super) fn open(config: &MediaConfig, sync: bool) -> Result<Arc<dyn ObjectStore>, String> {
    let options = || config.options.iter();
    let store: Arc<dyn ObjectStore> = match &config.location {
        MediaLocation::Directory(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let local = LocalFileSystem::new_with_prefix(dir).map_err(|e| e.to_string())?;
            Arc::new(local.with_fsync(sync))
        }
        MediaLocation::Memory => Arc::new(InMemory::new()),
        MediaLocation::S3 { bucket, .. } => {
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry());
            for (key, value) in options() {
                let key = key.parse().map_err(|e| format!("option {key}: {e}"))?;
                builder = builder.with_config(key, value);
            }
            Arc::new(builder.build().map_err(|e| e.to_string())?)
        }
        MediaLocation::Gcs { bucket, .. } => {
            let mut builder = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry());
            for (key, value) in options() {
                let key = key.parse().map_err(|e| format!("option {key}: {e}"))?;
                builder = builder.with_config(key, value);
            }
            Arc::new(builder.build().map_err(|e| e.to_string())?)
        }
        MediaLocation::Azure { container, .. } => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_container_name(container)
                .with_retry(retry());
            for (key, value) in options() {
                let key = key.parse().map_err(|e| format!("option {key}: {e}"))?;
                builder = builder.with_config(key, value);
            }
            Arc::new(builder.build().map_err(|e| e.to_string())?)
        }
    };
    let prefix = config.location.prefix();
    Ok(if prefix.is_empty() {
        store
    } else {
        Arc::new(PrefixStore::new(store, prefix))
    })
}

//! Where a lake's files live, and the one credentials config (`[storage]`) every engine gets
//! for object storage.
//!
//! With nothing configured, the standard AWS environment variables are read as every AWS tool
//! reads them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`
//! or `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`); a setting in
//! `[storage]` wins over its variable. Path-style addressing (`http://host:port/bucket/key`)
//! is chosen for an endpoint that is an IP address or `localhost` unless `path_style` says
//! otherwise. The settings become iceberg-rust's `s3.*` FileIO properties; a catalog property
//! of the same name (`[catalog] props`) wins over them. `gs://` and `abfss://` locations reach
//! the same resolving storage (opendal has both); their credentials are not configured yet.

use serde::Deserialize;

use super::object_cache::ObjectCacheConfig;

/// `[storage]`: how to reach the object store holding the lake.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The S3 API endpoint (`http://127.0.0.1:9000`; unset: AWS's for the region).
    pub endpoint: Option<String>,
    /// The region to sign requests for (unset: `us-east-1`).
    pub region: Option<String>,
    /// Path-style addressing (unset: on for an IP or `localhost` endpoint).
    pub path_style: Option<bool>,
    /// Static credentials (unset: the environment's, then opendal's default chain: profile,
    /// web identity, instance metadata).
    pub access_key_id: Option<String>,
    /// The secret of `access_key_id`.
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials.
    pub session_token: Option<String>,
    /// `[storage.cache]`: the in-memory cache of immutable objects (object-store lakes only).
    pub cache: ObjectCacheConfig,
}

impl std::fmt::Debug for StorageConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<set>");
        f.debug_struct("StorageConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("cache", &self.cache)
            .finish()
    }
}

/// What kind of place a location is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// The local file system (`file://`, or a bare path).
    Local,
    /// S3 or an S3 API (`s3://`, `s3a://`, `s3n://`).
    S3,
    /// Another object store opendal reaches (`gs://`, `abfss://`, ...).
    Other,
}

/// The scheme of `location`.
pub fn scheme_of(location: &str) -> Scheme {
    match location
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase())
    {
        None => Scheme::Local,
        Some(s) if s == "file" => Scheme::Local,
        Some(s) if matches!(s.as_str(), "s3" | "s3a" | "s3n") => Scheme::S3,
        Some(_) => Scheme::Other,
    }
}

impl StorageConfig {
    /// This config with what it leaves unset taken from the AWS environment variables.
    pub fn with_environment(&self) -> Self {
        self.with_variables(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    fn with_variables(&self, var: impl Fn(&str) -> Option<String>) -> Self {
        let first = |names: &[&str]| names.iter().find_map(|n| var(n));
        Self {
            endpoint: self
                .endpoint
                .clone()
                .or_else(|| first(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])),
            region: self
                .region
                .clone()
                .or_else(|| first(&["AWS_REGION", "AWS_DEFAULT_REGION"])),
            path_style: self.path_style,
            access_key_id: self
                .access_key_id
                .clone()
                .or_else(|| first(&["AWS_ACCESS_KEY_ID"])),
            secret_access_key: self
                .secret_access_key
                .clone()
                .or_else(|| first(&["AWS_SECRET_ACCESS_KEY"])),
            session_token: self
                .session_token
                .clone()
                .or_else(|| first(&["AWS_SESSION_TOKEN"])),
            cache: self.cache,
        }
    }

    /// Whether requests address buckets by path: as configured, else for a loopback, IP or
    /// `localhost` endpoint (local S3 servers have no per-bucket host names).
    pub fn path_style(&self) -> bool {
        self.path_style.unwrap_or_else(|| {
            self.endpoint.as_deref().is_some_and(|e| {
                let host = e.split_once("://").map_or(e, |(_, rest)| rest);
                let host = host.split(['/', '?']).next().unwrap_or_default();
                let name = match host.strip_prefix('[') {
                    Some(v6) => v6.split(']').next().unwrap_or_default(),
                    None => host.rsplit_once(':').map_or(host, |(h, _)| h),
                };
                name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
            })
        })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        self.region.as_deref().unwrap_or("us-east-1")
    }

    /// iceberg-rust's FileIO properties for these settings.
    pub fn iceberg_props(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("s3.region".to_string(), self.region().to_string()),
            (
                "s3.path-style-access".to_string(),
                self.path_style().to_string(),
            ),
        ];
        let mut put = |key: &str, value: &Option<String>| {
            if let Some(v) = value {
                out.push((key.to_string(), v.clone()));
            }
        };
        put("s3.endpoint", &self.endpoint);
        put("s3.access-key-id", &self.access_key_id);
        put("s3.secret-access-key", &self.secret_access_key);
        put("s3.session-token", &self.session_token);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_fills_what_the_config_leaves_unset() {
        let env = |name: &str| match name {
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:9000".to_string()),
            "AWS_REGION" => Some("eu-west-1".to_string()),
            "AWS_ACCESS_KEY_ID" => Some("from-env".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_string()),
            _ => None,
        };
        let configured = StorageConfig {
            access_key_id: Some("configured".into()),
            ..StorageConfig::default()
        };
        let s = configured.with_variables(env);
        assert_eq!(s.access_key_id.as_deref(), Some("configured"));
        assert_eq!(s.secret_access_key.as_deref(), Some("secret"));
        assert_eq!(s.region(), "eu-west-1");
        assert!(s.path_style(), "an IP endpoint is addressed by path");
        let props = s.iceberg_props();
        assert!(props.contains(&("s3.endpoint".into(), "http://127.0.0.1:9000".into())));
        assert!(props.contains(&("s3.path-style-access".into(), "true".into())));
        assert!(
            !format!("{s:?}").contains("secret\""),
            "secrets are not printed"
        );
    }

    #[test]
    fn path_style_is_chosen_for_local_endpoints_only() {
        let at = |endpoint: &str| StorageConfig {
            endpoint: Some(endpoint.into()),
            ..StorageConfig::default()
        };
        assert!(at("http://localhost:4566").path_style());
        assert!(at("http://[::1]:9000/").path_style());
        assert!(at("10.0.0.7:9000").path_style());
        assert!(!at("https://s3.eu-west-1.amazonaws.com").path_style());
        assert!(!StorageConfig::default().path_style());
        let forced = StorageConfig {
            path_style: Some(false),
            ..at("http://127.0.0.1:9000")
        };
        assert!(!forced.path_style());
    }

    #[test]
    fn schemes() {
        assert_eq!(scheme_of("/tmp/wh"), Scheme::Local);
        assert_eq!(scheme_of("file:///tmp/wh"), Scheme::Local);
        assert_eq!(scheme_of("s3://bucket/wh"), Scheme::S3);
        assert_eq!(scheme_of("S3A://bucket/wh"), Scheme::S3);
        assert_eq!(scheme_of("gs://bucket/wh"), Scheme::Other);
    }
}

//! A bounded in-memory cache of the lake's immutable objects, shared by everything that reads
//! through iceberg-rust's FileIO (the DataFusion engine, scan estimates, maintenance).
//!
//! Iceberg never rewrites a file in place: a metadata JSON, a manifest list, a manifest or a
//! Parquet file keeps its bytes for as long as its path exists. So a byte range read once can be
//! served again without asking the object store, and a dashboard repeated on an unchanged table
//! makes no object-store request at all (the version token is the catalog's business, not the
//! store's). After a commit only the new metadata and the files not seen before are fetched.
//!
//! Two tiers, each bounded by bytes (LRU by moka's TinyLFU): `metadata` holds metadata JSON,
//! manifest lists, manifests and Parquet footers (the first range a Parquet reader asks for is
//! its footer: iceberg-rust reads the metadata before any page); `data` holds the other Parquet
//! ranges. A range inside a cached range is served by slicing it. Writes and deletes through
//! the same FileIO drop what they touch. Objects changed out of band under the same path break
//! Iceberg's own rules; the cache keeps serving what it read (the bytes a snapshot named).
//!
//! The cache wraps any [`StorageFactory`], so it applies to every scheme opendal reaches; the
//! lake turns it on for object-store warehouses (local files have the OS page cache).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

/// `[storage.cache]`: how much memory the object cache may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectCacheConfig {
    /// Whether lake reads are cached at all: objects (object-store lakes) and decoded files
    /// (every lake).
    pub enabled: bool,
    /// Bytes for metadata JSON, manifest lists, manifests and Parquet footers.
    pub metadata_bytes: u64,
    /// Bytes for Parquet data ranges.
    pub data_bytes: u64,
    /// Bytes of small data files kept decoded as Arrow ([`super::decoded`]), on every lake,
    /// local ones too (0: none).
    pub decoded_bytes: u64,
}

impl Default for ObjectCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            metadata_bytes: 256 << 20,
            data_bytes: 1 << 30,
            decoded_bytes: 64 << 20,
        }
    }
}

/// Which tier an object's bytes live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Metadata JSON, manifest lists, manifests, Parquet footers.
    Metadata,
    /// Parquet pages.
    Data,
}

impl Tier {
    /// The label on /metrics.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Metadata => "metadata",
            Tier::Data => "data",
        }
    }
}

/// An object-store request the cache passed on (or made itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A whole-object GET.
    Get,
    /// A ranged GET.
    RangeGet,
    /// A HEAD (size or existence).
    Head,
    /// A PUT (whole or multipart).
    Put,
    /// A DELETE (one object, a batch or a prefix).
    Delete,
}

impl Request {
    const ALL: [Request; 5] = [
        Request::Get,
        Request::RangeGet,
        Request::Head,
        Request::Put,
        Request::Delete,
    ];

    /// The label on /metrics.
    pub fn name(self) -> &'static str {
        match self {
            Request::Get => "get",
            Request::RangeGet => "range_get",
            Request::Head => "head",
            Request::Put => "put",
            Request::Delete => "delete",
        }
    }
}

#[derive(Default)]
struct TierCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
}

/// One tier's numbers at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierStats {
    /// The tier.
    pub tier: Tier,
    /// Reads served from memory.
    pub hits: u64,
    /// Reads that went to the object store.
    pub misses: u64,
    /// Bytes served from memory.
    pub hit_bytes: u64,
    /// Bytes fetched from the object store.
    pub miss_bytes: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// The bound.
    pub capacity: u64,
}

/// The cache's numbers at one moment (for /metrics and `lakegate.cache_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCacheStats {
    /// Per tier.
    pub tiers: Vec<TierStats>,
    /// Object-store requests made through the lake's FileIO, by kind.
    pub requests: Vec<(Request, u64)>,
}

/// The cached ranges of one object (sorted by start, none inside another).
type Ranges = Arc<Vec<(Range<u64>, Bytes)>>;

/// The shared cache: two byte-bounded tiers and the request counters.
pub struct ObjectCache {
    config: ObjectCacheConfig,
    metadata: moka::sync::Cache<String, Ranges>,
    data: moka::sync::Cache<String, Ranges>,
    sizes: moka::sync::Cache<String, u64>,
    counters: [TierCounters; 2],
    requests: [AtomicU64; 5],
}

impl fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectCache")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for ObjectCache {
    fn default() -> Self {
        Self::new(ObjectCacheConfig::default())
    }
}

fn weigh(key: &str, ranges: &Ranges) -> u32 {
    let bytes: usize = ranges.iter().map(|(_, b)| b.len() + 32).sum();
    u32::try_from(bytes + key.len()).unwrap_or(u32::MAX)
}

impl ObjectCache {
    /// A cache bounded as `config` says.
    pub fn new(config: ObjectCacheConfig) -> Self {
        let tier = |capacity: u64| {
            moka::sync::Cache::builder()
                .max_capacity(capacity)
                .weigher(|k: &String, v: &Ranges| weigh(k, v))
                .build()
        };
        Self {
            config,
            metadata: tier(config.metadata_bytes),
            data: tier(config.data_bytes),
            sizes: moka::sync::Cache::new(100_000),
            counters: Default::default(),
            requests: Default::default(),
        }
    }

    /// Whether reads are cached.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    fn tier(&self, tier: Tier) -> &moka::sync::Cache<String, Ranges> {
        match tier {
            Tier::Metadata => &self.metadata,
            Tier::Data => &self.data,
        }
    }

    fn counters(&self, tier: Tier) -> &TierCounters {
        &self.counters[tier as usize]
    }

    fn count(&self, request: Request) {
        self.requests[request as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The bytes of `range` of `path`, if a cached range holds them.
    fn lookup(&self, tier: Tier, path: &str, range: &Range<u64>) -> Option<Bytes> {
        let ranges = self.tier(tier).get(path)?;
        let (have, bytes) = ranges
            .iter()
            .find(|(r, _)| r.start <= range.start && range.end <= r.end)?;
        let start = usize::try_from(range.start - have.start).ok()?;
        let end = usize::try_from(range.end - have.start).ok()?;
        (end <= bytes.len()).then(|| bytes.slice(start..end))
    }

    /// Remembers `bytes` as `range` of `path`, dropping cached ranges inside it.
    fn insert(&self, tier: Tier, path: &str, range: Range<u64>, bytes: Bytes) {
        let cache = self.tier(tier);
        let mut ranges: Vec<(Range<u64>, Bytes)> = cache
            .get(path)
            .map(|r| {
                r.iter()
                    .filter(|(r, _)| !(range.start <= r.start && r.end <= range.end))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let at = ranges.partition_point(|(r, _)| r.start < range.start);
        ranges.insert(at, (range, bytes));
        cache.insert(path.to_string(), Arc::new(ranges));
    }

    /// Forgets everything about `path` (it is being written or deleted).
    fn forget(&self, path: &str) {
        self.metadata.invalidate(path);
        self.data.invalidate(path);
        self.sizes.invalidate(path);
    }

    /// Forgets every object under `prefix`.
    fn forget_prefix(&self, prefix: &str) {
        for cache in [&self.metadata, &self.data] {
            let keys: Vec<Arc<String>> = cache
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, _)| k)
                .collect();
            for k in keys {
                cache.invalidate(k.as_str());
            }
        }
        let keys: Vec<Arc<String>> = self
            .sizes
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            self.sizes.invalidate(k.as_str());
        }
    }

    /// The numbers now.
    pub fn stats(&self) -> ObjectCacheStats {
        let tiers = [Tier::Metadata, Tier::Data]
            .into_iter()
            .map(|tier| {
                let c = self.counters(tier);
                let cache = self.tier(tier);
                cache.run_pending_tasks();
                TierStats {
                    tier,
                    hits: c.hits.load(Ordering::Relaxed),
                    misses: c.misses.load(Ordering::Relaxed),
                    hit_bytes: c.hit_bytes.load(Ordering::Relaxed),
                    miss_bytes: c.miss_bytes.load(Ordering::Relaxed),
                    bytes: cache.weighted_size(),
                    capacity: match tier {
                        Tier::Metadata => self.config.metadata_bytes,
                        Tier::Data => self.config.data_bytes,
                    },
                }
            })
            .collect();
        let requests = Request::ALL
            .into_iter()
            .map(|r| (r, self.requests[r as usize].load(Ordering::Relaxed)))
            .collect();
        ObjectCacheStats { tiers, requests }
    }

    fn hit(&self, tier: Tier, bytes: &Bytes) {
        let c = self.counters(tier);
        c.hits.fetch_add(1, Ordering::Relaxed);
        c.hit_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    fn miss(&self, tier: Tier, bytes: &Bytes) {
        let c = self.counters(tier);
        c.misses.fetch_add(1, Ordering::Relaxed);
        c.miss_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
}

/// What kind of Iceberg object a path names, as far as caching goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Metadata JSON, Avro manifest (list), Puffin statistics: read whole, immutable.
    Metadata,
    /// A Parquet data or delete file.
    Parquet,
    /// Anything else (a `version-hint.text` is rewritten in place): never cached.
    Mutable,
}

fn kind_of(path: &str) -> Kind {
    let name = path.rsplit('/').next().unwrap_or(path);
    if name.ends_with(".parquet") {
        Kind::Parquet
    } else if name.ends_with(".metadata.json")
        || name.ends_with(".metadata.json.gz")
        || name.ends_with(".gz.metadata.json")
        || name.ends_with(".avro")
        || name.ends_with(".puffin")
    {
        Kind::Metadata
    } else {
        Kind::Mutable
    }
}

/// A [`StorageFactory`] whose storages read through an [`ObjectCache`].
#[derive(Debug, Serialize, Deserialize)]
pub struct CachingStorageFactory {
    inner: Box<dyn StorageFactory>,
    #[serde(skip)]
    cache: Arc<ObjectCache>,
}

impl CachingStorageFactory {
    /// Wraps `inner`, sharing `cache`.
    pub fn new(inner: Box<dyn StorageFactory>, cache: Arc<ObjectCache>) -> Self {
        Self { inner, cache }
    }
}

#[typetag::serde(name = "LakegateCachingStorageFactory")]
impl StorageFactory for CachingStorageFactory {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(CachingStorage {
            inner: self.inner.build(config)?,
            cache: Arc::clone(&self.cache),
            key_id: config.get("s3.access-key-id").cloned(),
        }))
    }
}

/// A failed request as one sentence a user can act on: refused (opendal's `PermissionDenied`:
/// a wrong key id or secret, an expired token, a policy without the bucket), naming the key id
/// and the object; or unanswered (no connection, after opendal's retries). Other errors pass.
fn explain_failure(path: &str, key_id: Option<&str>, e: iceberg::Error) -> iceberg::Error {
    use crate::error::{
        STORAGE_REFUSED, STORAGE_REFUSED_END, STORAGE_UNREACHABLE, STORAGE_UNREACHABLE_END,
    };
    let raw = e.to_string();
    let message = if raw.contains("PermissionDenied") {
        let field = |name: &str| {
            let at = raw.find(&format!("{name}: \""))? + name.len() + 3;
            raw[at..].split('"').next().map(str::to_string)
        };
        let why = match (field("code"), field("message")) {
            (Some(code), Some(message)) if !code.is_empty() => {
                format!("{code}: {}", message.trim_end_matches('.'))
            }
            _ => "access denied".to_string(),
        };
        let key = match key_id {
            Some(id) => format!("access key id \"{id}\""),
            None => "no access key id configured: the default credential chain's".to_string(),
        };
        format!(
            "{STORAGE_REFUSED} ({key}) reading {path}: {why}. Check [storage] access_key_id \
             and secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), and \
             {STORAGE_REFUSED_END}"
        )
    } else if raw.contains("error sending request") || raw.contains("send http request") {
        format!(
            "{STORAGE_UNREACHABLE} reading {path} (no answer after retries). Check that its \
             endpoint is up and reachable ([storage] endpoint or AWS_ENDPOINT_URL), \
             {STORAGE_UNREACHABLE_END}"
        )
    } else {
        return e;
    };
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, message)
}

/// A [`Storage`] that serves immutable objects from the cache and counts what it passes on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CachingStorage {
    inner: Arc<dyn Storage>,
    #[serde(skip)]
    cache: Arc<ObjectCache>,
    /// The key id requests are signed with (named when the store refuses them).
    key_id: Option<String>,
}

impl CachingStorage {
    fn explain<T>(&self, path: &str, r: iceberg::Result<T>) -> iceberg::Result<T> {
        r.map_err(|e| explain_failure(path, self.key_id.as_deref(), e))
    }
}

#[async_trait]
#[typetag::serde(name = "LakegateCachingStorage")]
impl Storage for CachingStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.cache.count(Request::Head);
        self.explain(path, self.inner.exists(path).await)
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        let immutable = self.cache.enabled() && kind_of(path) != Kind::Mutable;
        if immutable && let Some(size) = self.cache.sizes.get(path) {
            return Ok(FileMetadata { size });
        }
        self.cache.count(Request::Head);
        let meta = self.explain(path, self.inner.metadata(path).await)?;
        if immutable {
            self.cache.sizes.insert(path.to_string(), meta.size);
        }
        Ok(meta)
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        let tier = match kind_of(path) {
            _ if !self.cache.enabled() => None,
            Kind::Metadata => Some(Tier::Metadata),
            Kind::Parquet => Some(Tier::Data),
            Kind::Mutable => None,
        };
        let Some(tier) = tier else {
            self.cache.count(Request::Get);
            return self.explain(path, self.inner.read(path).await);
        };
        let whole = 0..u64::MAX;
        if let Some(ranges) = self.cache.tier(tier).get(path)
            && let Some((_, bytes)) = ranges.iter().find(|(r, _)| *r == whole)
        {
            self.cache.hit(tier, bytes);
            return Ok(bytes.clone());
        }
        self.cache.count(Request::Get);
        let bytes = self.explain(path, self.inner.read(path).await)?;
        self.cache.miss(tier, &bytes);
        self.cache.insert(tier, path, whole, bytes.clone());
        Ok(bytes)
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        Ok(Box::new(CachingReader {
            storage: self.clone(),
            path: path.to_string(),
            cached: self.cache.enabled() && kind_of(path) == Kind::Parquet,
            footer_read: AtomicBool::new(false),
            inner: OnceCell::new(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.cache.forget(path);
        self.cache.count(Request::Put);
        self.explain(path, self.inner.write(path, bs).await)
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.cache.forget(path);
        self.cache.count(Request::Put);
        self.explain(path, self.inner.writer(path).await)
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.cache.forget(path);
        self.cache.count(Request::Delete);
        self.explain(path, self.inner.delete(path).await)
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.cache.forget_prefix(path);
        self.cache.count(Request::Delete);
        self.explain(path, self.inner.delete_prefix(path).await)
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        use futures::StreamExt;
        let cache = Arc::clone(&self.cache);
        let paths = paths
            .inspect(move |p| {
                cache.forget(p);
                cache.count(Request::Delete);
            })
            .boxed();
        self.inner.delete_stream(paths).await
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Reads ranges of one object through the cache; opens the real reader on the first miss.
struct CachingReader {
    storage: CachingStorage,
    path: String,
    cached: bool,
    footer_read: AtomicBool,
    inner: OnceCell<Box<dyn FileRead>>,
}

impl CachingReader {
    async fn fetch(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        let inner = self
            .inner
            .get_or_try_init(|| self.storage.inner.reader(&self.path))
            .await;
        let inner = self.storage.explain(&self.path, inner)?;
        self.storage.cache.count(Request::RangeGet);
        self.storage.explain(&self.path, inner.read(range).await)
    }
}

#[async_trait]
impl FileRead for CachingReader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if !self.cached {
            return self.fetch(range).await;
        }
        let cache = &self.storage.cache;
        // A footer sits in the metadata tier, but a small file's footer read is the whole
        // file, so pages are looked for there too.
        for tier in [Tier::Metadata, Tier::Data] {
            if let Some(bytes) = cache.lookup(tier, &self.path, &range) {
                self.footer_read.store(true, Ordering::Relaxed);
                cache.hit(tier, &bytes);
                return Ok(bytes);
            }
        }
        let tier = if self.footer_read.swap(true, Ordering::Relaxed) {
            Tier::Data
        } else {
            Tier::Metadata
        };
        let bytes = self.fetch(range.clone()).await?;
        cache.miss(tier, &bytes);
        let fetched = range.start..range.start + bytes.len() as u64;
        cache.insert(tier, &self.path, fetched, bytes.clone());
        Ok(bytes)
    }
}

#[cfg(test)]
#[path = "object_cache_tests.rs"]
mod tests;

//! The object cache's unit tests: what is cached, bounds, invalidation (memory storage).

use super::*;
use iceberg::io::MemoryStorageFactory;

fn storage(config: ObjectCacheConfig) -> (Arc<dyn Storage>, Arc<ObjectCache>) {
    let cache = Arc::new(ObjectCache::new(config));
    let factory = CachingStorageFactory::new(Box::new(MemoryStorageFactory), cache.clone());
    let config = StorageConfig::new();
    (factory.build(&config).expect("memory storage"), cache)
}

fn requests(cache: &ObjectCache, kind: Request) -> u64 {
    let stats = cache.stats();
    stats
        .requests
        .iter()
        .find(|(r, _)| *r == kind)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test]
async fn a_second_read_of_an_immutable_object_makes_no_request() {
    let (s, cache) = storage(ObjectCacheConfig::default());
    let path = "memory:///wh/t/metadata/00001-x.metadata.json";
    s.write(path, Bytes::from_static(b"{\"v\":1}"))
        .await
        .expect("memory storage");
    assert_eq!(
        s.read(path).await.expect("memory storage"),
        Bytes::from_static(b"{\"v\":1}")
    );
    assert_eq!(
        s.read(path).await.expect("memory storage"),
        Bytes::from_static(b"{\"v\":1}")
    );
    assert_eq!(requests(&cache, Request::Get), 1);
    let meta = &cache.stats().tiers[0];
    assert_eq!((meta.hits, meta.misses), (1, 1));
    assert!(meta.bytes > 0);
}

#[tokio::test]
async fn a_mutable_file_is_always_read_afresh() {
    let (s, cache) = storage(ObjectCacheConfig::default());
    let path = "memory:///wh/t/metadata/version-hint.text";
    s.write(path, Bytes::from_static(b"1"))
        .await
        .expect("memory storage");
    s.read(path).await.expect("memory storage");
    s.write(path, Bytes::from_static(b"2"))
        .await
        .expect("memory storage");
    assert_eq!(
        s.read(path).await.expect("memory storage"),
        Bytes::from_static(b"2")
    );
    assert_eq!(requests(&cache, Request::Get), 2);
}

#[tokio::test]
async fn parquet_ranges_are_served_from_a_cached_range_that_holds_them() {
    let (s, cache) = storage(ObjectCacheConfig::default());
    let path = "memory:///wh/t/data/part-0.parquet";
    let body: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    s.write(path, Bytes::from(body.clone()))
        .await
        .expect("memory storage");
    // The footer read (the whole small file), then pages inside it: one request.
    let r = s.reader(path).await.expect("memory storage");
    assert_eq!(r.read(0..4096).await.expect("memory storage").len(), 4096);
    assert_eq!(
        r.read(100..200).await.expect("memory storage"),
        Bytes::from(body[100..200].to_vec())
    );
    // A new reader (the next statement) finds them too.
    let r = s.reader(path).await.expect("memory storage");
    assert_eq!(
        r.read(4000..4096).await.expect("memory storage"),
        Bytes::from(body[4000..].to_vec())
    );
    assert_eq!(requests(&cache, Request::RangeGet), 1);
    // Rewriting the path (never done by Iceberg, done by tests) drops it.
    s.write(path, Bytes::from_static(b"new"))
        .await
        .expect("memory storage");
    let r = s.reader(path).await.expect("memory storage");
    assert_eq!(
        r.read(0..3).await.expect("memory storage"),
        Bytes::from_static(b"new")
    );
    assert_eq!(requests(&cache, Request::RangeGet), 2);
}

#[tokio::test]
async fn the_tiers_stay_within_their_bounds() {
    let config = ObjectCacheConfig {
        enabled: true,
        metadata_bytes: 8 << 10,
        data_bytes: 8 << 10,
        ..ObjectCacheConfig::default()
    };
    let (s, cache) = storage(config);
    for i in 0..64 {
        let path = format!("memory:///wh/t/metadata/snap-{i}.avro");
        s.write(&path, Bytes::from(vec![7u8; 1024]))
            .await
            .expect("memory storage");
        s.read(&path).await.expect("memory storage");
    }
    let meta = &cache.stats().tiers[0];
    assert!(meta.bytes <= 8 << 10, "{meta:?}");
    assert_eq!(meta.misses, 64);
}

#[tokio::test]
async fn a_disabled_cache_passes_every_read_on() {
    let config = ObjectCacheConfig {
        enabled: false,
        ..ObjectCacheConfig::default()
    };
    let (s, cache) = storage(config);
    let path = "memory:///wh/t/metadata/snap-1.avro";
    s.write(path, Bytes::from_static(b"avro"))
        .await
        .expect("memory storage");
    s.read(path).await.expect("memory storage");
    s.read(path).await.expect("memory storage");
    assert_eq!(requests(&cache, Request::Get), 2);
    assert_eq!(cache.stats().tiers[0].hits, 0);
}

#[test]
fn what_is_cached() {
    assert_eq!(
        kind_of("s3://b/t/metadata/00003-a.metadata.json"),
        Kind::Metadata
    );
    assert_eq!(kind_of("s3://b/t/metadata/snap-1-1-a.avro"), Kind::Metadata);
    assert_eq!(kind_of("s3://b/t/data/x=1/0-a.parquet"), Kind::Parquet);
    assert_eq!(
        kind_of("s3://b/t/metadata/version-hint.text"),
        Kind::Mutable
    );
}

use super::*;

fn cfg(uri: &str) -> LakeConfig {
    LakeConfig {
        uri: uri.into(),
        name: "lake".into(),
        warehouse: "file:///tmp/w".into(),
        props: BTreeMap::new(),
        storage: StorageConfig::default(),
    }
}

#[test]
fn catalog_kind_follows_the_uri_scheme() {
    assert_eq!(cfg("sqlite:///a.db").kind().ok(), Some(CatalogKind::Sqlite));
    assert_eq!(
        cfg("postgresql://u@h:1/d").kind().ok(),
        Some(CatalogKind::Postgres)
    );
    assert_eq!(cfg("http://h:8181").kind().ok(), Some(CatalogKind::Rest));
    let err = cfg("mysql://x").kind().expect_err("mysql is not a catalog");
    assert!(err.to_string().contains("catalog.uri"), "{err}");
}

#[test]
fn missing_sqlite_file_names_the_setting() {
    let err = cfg("sqlite:///nonexistent/dir/c.db")
        .validate()
        .expect_err("missing file");
    assert!(err.to_string().contains("catalog.uri"), "{err}");
    assert!(err.to_string().contains("/nonexistent/dir/c.db"), "{err}");
}

#[test]
fn sqlite_path_strips_scheme_and_query() {
    assert_eq!(sqlite_path("sqlite:///abs/c.db?mode=rwc"), "/abs/c.db");
    assert_eq!(sqlite_path("sqlite:rel.db"), "rel.db");
}

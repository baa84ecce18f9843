//! Lets the binaries and tests of the crates that link DuckDB find `libduckdb.so` where they were
//! linked against it (`DUCKDB_LIB_DIR`, set in `.cargo/config.toml`), without `LD_LIBRARY_PATH`.
//! Shared by lakegate-engines, lakegate-maintenance and lakegate-gateway (`build = …`).

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED_DUCKDB").is_some() {
        return;
    }
    if let Ok(dir) = std::env::var("DUCKDB_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}

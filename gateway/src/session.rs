//! Per-connection state: settings (`SET`/`SHOW`/`RESET`), open cursors, who is connected.
//!
//! Settings follow PostgreSQL: known parameters and any dotted custom name (`myapp.x`,
//! `lakegate.*`) can be set; unknown plain names are refused with 42704, as PostgreSQL does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::execution::SendableRecordBatchStream;
use lakegate_engines::Settings;
use sync_wrapper::SyncWrapper;

use crate::error::{Error, Result};
use crate::service::Frontend;

mod interned;

/// A setting clients may read and (unless read-only) change.
struct Param {
    name: &'static str,
    default: &'static str,
    read_only: bool,
}

const fn rw(name: &'static str, default: &'static str) -> Param {
    Param {
        name,
        default,
        read_only: false,
    }
}

const fn ro(name: &'static str, default: &'static str) -> Param {
    Param {
        name,
        default,
        read_only: true,
    }
}

/// The parameters lakegate knows, with PostgreSQL's defaults (lower-case names).
const PARAMS: &[Param] = &[
    rw("application_name", ""),
    rw("client_encoding", "UTF8"),
    rw("datestyle", "ISO, MDY"),
    rw("intervalstyle", "postgres"),
    rw("timezone", "UTC"),
    rw("search_path", "public"),
    rw("extra_float_digits", "1"),
    rw("statement_timeout", "0"),
    rw("lock_timeout", "0"),
    rw("idle_in_transaction_session_timeout", "0"),
    rw("bytea_output", "hex"),
    rw("client_min_messages", "notice"),
    rw("default_transaction_isolation", "read committed"),
    rw("transaction_isolation", "read committed"),
    rw("default_transaction_read_only", "on"),
    rw("transaction_read_only", "on"),
    rw("lc_messages", "C"),
    rw("lc_monetary", "C"),
    rw("lc_numeric", "C"),
    rw("lc_time", "C"),
    rw("escape_string_warning", "on"),
    rw("synchronous_commit", "on"),
    rw("row_security", "on"),
    rw("jit", "off"),
    rw("work_mem", "4MB"),
    rw("max_parallel_workers_per_gather", "2"),
    rw("geqo", "on"),
    rw("join_collapse_limit", "8"),
    rw("from_collapse_limit", "8"),
    rw("plan_cache_mode", "auto"),
    rw("role", "none"),
    rw("default_text_search_config", "pg_catalog.english"),
    rw("array_nulls", "on"),
    rw("xmloption", "content"),
    // lakegate's own: the engine this session pins (`auto`: the router chooses).
    rw("lakegate.engine", "auto"),
    // The routing group this session asks for (`auto`: the rules decide).
    rw("lakegate.group", "auto"),
    // A client tag routing rules can match (`tags = [...]`).
    rw("lakegate.tag", ""),
    ro("standard_conforming_strings", "on"),
    // Both filled by `Session::new` from the catalog mirror's server (engines' `server_version`).
    ro("server_version", ""),
    ro("server_version_num", ""),
    ro("server_encoding", "UTF8"),
    ro("integer_datetimes", "on"),
    ro("is_superuser", "off"),
    ro("max_identifier_length", "63"),
    ro("block_size", "8192"),
    // Both filled by `Session::new` from the catalog mirror's database.
    ro("lc_collate", "C"),
    ro("lc_ctype", "C"),
];

/// Values `lakegate.engine` accepts: `auto` (routing) or an engine's name.
pub const ENGINE_NAMES: &[&str] = &[
    "auto",
    "datafusion",
    "accelerated",
    "duckdb",
    "trino",
    "spark",
];

fn param(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name == name)
}

/// The canonical (case-sensitive) name PostgreSQL reports for a setting in ParameterStatus.
pub fn reported_name(name: &str) -> Option<&'static str> {
    match name {
        "timezone" => Some("TimeZone"),
        "datestyle" => Some("DateStyle"),
        "intervalstyle" => Some("IntervalStyle"),
        "application_name" => Some("application_name"),
        "client_encoding" => Some("client_encoding"),
        "search_path" => Some("search_path"),
        "standard_conforming_strings" => Some("standard_conforming_strings"),
        "default_transaction_read_only" => Some("default_transaction_read_only"),
        _ => None,
    }
}

/// A cursor opened by `DECLARE`, read by `FETCH`.
pub struct Cursor {
    /// The remaining result (wrapped so the session can be shared across await points; it is
    /// only ever read through `&mut`).
    pub stream: SyncWrapper<SendableRecordBatchStream>,
    /// The result's columns.
    pub schema: arrow::datatypes::SchemaRef,
    /// Rows read from the stream but not yet fetched.
    pub pending: Option<arrow::record_batch::RecordBatch>,
    /// `WITH HOLD`: survives the end of the transaction.
    pub hold: bool,
}

/// One client connection's state.
pub struct Session {
    user: String,
    database: String,
    frontend: Frontend,
    /// Shared with the statements' engine settings and, when equal, with other sessions
    /// ([`interned`]); replaced, never changed in place, when a setting changes.
    values: Arc<BTreeMap<String, String>>,
    defaults: BTreeMap<String, String>,
    cursors: HashMap<String, Cursor>,
    /// The text formatting options made from `values`, kept while `values` is that version
    /// (the map is replaced, never changed in place, while this holds it).
    formatting: std::sync::Mutex<Option<Made<pgwire::types::format::FormatOptions>>>,
    /// The engine settings made from `values` (and the user and database), kept likewise:
    /// every statement asks for them.
    settings: std::sync::Mutex<Option<Made<Settings>>>,
}

/// What was made from one version of a session's settings.
type Made<T> = (Arc<BTreeMap<String, String>>, Arc<T>);

/// What `slot` keeps for `values` (this version of the settings: the map is replaced, never
/// changed in place), else made by `make` now and kept.
fn made_for<T>(
    slot: &std::sync::Mutex<Option<Made<T>>>,
    values: &Arc<BTreeMap<String, String>>,
    make: impl FnOnce() -> T,
) -> Arc<T> {
    let mut kept = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, made)) = kept.as_ref()
        && Arc::ptr_eq(at, values)
    {
        return made.clone();
    }
    let made = Arc::new(make());
    *kept = Some((values.clone(), made.clone()));
    made
}

impl Session {
    /// A new session for `user` with PostgreSQL's defaults and `search_path = default_schema`.
    pub fn new(user: &str, default_schema: &str) -> Self {
        let mut defaults: BTreeMap<String, String> = PARAMS
            .iter()
            .map(|p| (p.name.to_string(), p.default.to_string()))
            .collect();
        defaults.insert("search_path".into(), default_schema.to_string());
        defaults.insert(
            "server_version".into(),
            lakegate_engines::system_catalog::server_version().into(),
        );
        defaults.insert(
            "server_version_num".into(),
            lakegate_engines::system_catalog::server_version_num(),
        );
        let (collate, ctype) = lakegate_engines::system_catalog::server_locale();
        defaults.insert("lc_collate".into(), collate.into());
        defaults.insert("lc_ctype".into(), ctype.into());
        Self {
            user: user.to_string(),
            database: "lakegate".to_string(),
            frontend: Frontend::Local,
            values: interned::interned(defaults.clone()),
            defaults,
            cursors: HashMap::new(),
            formatting: std::sync::Mutex::new(None),
            settings: std::sync::Mutex::new(None),
        }
    }

    /// Applies startup parameters (`options=-c k=v`, `application_name`, `TimeZone`, ...);
    /// they become the values `RESET` returns to, as in PostgreSQL.
    ///
    /// # Errors
    /// When a parameter names an unknown setting or has a bad value.
    pub fn apply_startup(&mut self, startup: &[(String, String)]) -> Result<()> {
        for (k, v) in startup {
            self.set(k, v)?;
        }
        self.defaults = self.values.as_ref().clone();
        Ok(())
    }

    /// This session as coming from `frontend`.
    pub fn with_frontend(mut self, frontend: Frontend) -> Self {
        self.frontend = frontend;
        self
    }

    /// This session as connected to database `name` (what `current_database()` and
    /// `pg_database` name; any name is accepted: the lake is the same).
    pub fn with_database(mut self, name: &str) -> Self {
        self.database = name.to_string();
        *self.settings.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
        self
    }

    /// The database the client connected to.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The frontend the session came through.
    pub fn frontend(&self) -> Frontend {
        self.frontend
    }

    /// The connected user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// `SET name = value`.
    ///
    /// # Errors
    /// Unknown or read-only settings, values the setting refuses.
    pub fn set(&mut self, name: &str, value: &str) -> Result<String> {
        let name = name.to_ascii_lowercase();
        let value = match param(&name) {
            Some(p) if p.read_only => {
                if self
                    .values
                    .get(&name)
                    .is_some_and(|v| v.eq_ignore_ascii_case(value))
                {
                    return Ok(name);
                }
                return Err(Error::ReadOnlySetting { name });
            }
            Some(_) => normalize(&name, value)?,
            None if name.contains('.') => value.to_string(),
            None => return Err(Error::UnknownSetting { name }),
        };
        self.change(|values| {
            values.insert(name.clone(), value);
        });
        Ok(name)
    }

    /// `SHOW name`.
    ///
    /// # Errors
    /// [`Error::UnknownSetting`].
    pub fn show(&self, name: &str) -> Result<String> {
        let name = name.to_ascii_lowercase();
        self.values
            .get(&name)
            .cloned()
            .ok_or(Error::UnknownSetting { name })
    }

    /// `RESET name`; returns the canonical name.
    ///
    /// # Errors
    /// [`Error::UnknownSetting`], [`Error::ReadOnlySetting`].
    pub fn reset(&mut self, name: &str) -> Result<String> {
        let name = name.to_ascii_lowercase();
        if param(&name).is_some_and(|p| p.read_only) {
            return Err(Error::ReadOnlySetting { name });
        }
        match self.defaults.get(&name) {
            Some(v) => {
                let v = v.clone();
                self.change(|values| {
                    values.insert(name.clone(), v);
                });
            }
            None if name.contains('.') => self.change(|values| {
                values.remove(&name);
            }),
            None => return Err(Error::UnknownSetting { name }),
        }
        Ok(name)
    }

    /// `RESET ALL`.
    pub fn reset_all(&mut self) {
        self.values = interned::interned(self.defaults.clone());
    }

    /// Replaces the settings by `change` of a copy.
    fn change(&mut self, change: impl FnOnce(&mut BTreeMap<String, String>)) {
        let mut values = self.values.as_ref().clone();
        change(&mut values);
        self.values = interned::interned(values);
    }

    /// Every setting, by name.
    pub fn values(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    /// The text formatting options of the current settings: made by `make` when a setting
    /// changed since the last call, else the ones made then.
    pub fn formatting(
        &self,
        make: impl FnOnce(&BTreeMap<String, String>) -> pgwire::types::format::FormatOptions,
    ) -> Arc<pgwire::types::format::FormatOptions> {
        made_for(&self.formatting, &self.values, || make(&self.values))
    }

    /// The engine this session pins (`SET lakegate.engine`), `None` for routing.
    pub fn pinned_engine(&self) -> Option<&str> {
        self.values
            .get("lakegate.engine")
            .map(String::as_str)
            .filter(|e| *e != "auto")
    }

    /// The routing group this session asks for, `None` to let the rules decide.
    pub fn pinned_group(&self) -> Option<&str> {
        self.values
            .get("lakegate.group")
            .map(String::as_str)
            .filter(|g| *g != "auto" && !g.is_empty())
    }

    /// `application_name`.
    pub fn application_name(&self) -> &str {
        self.values
            .get("application_name")
            .map_or("", String::as_str)
    }

    /// The client tag (`lakegate.tag`).
    pub fn tag(&self) -> &str {
        self.values.get("lakegate.tag").map_or("", String::as_str)
    }

    /// `statement_timeout` as a duration (`None`: no limit).
    pub fn statement_timeout(&self) -> Option<std::time::Duration> {
        let ms = self
            .values
            .get("statement_timeout")
            .and_then(|v| parse_millis(v))?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }

    /// `idle_in_transaction_session_timeout`, when set (not 0).
    pub fn idle_in_transaction_timeout(&self) -> Option<std::time::Duration> {
        let ms = self
            .values
            .get("idle_in_transaction_session_timeout")
            .and_then(|v| parse_millis(v))?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }

    /// The session's `TimeZone` as engines and formatters read it: a zone name as set, and a
    /// numeric offset (`-03:30`) turned from PostgreSQL's POSIX reading (positive west of
    /// Greenwich) into ISO 8601's (`+03:30`, positive east).
    pub fn time_zone(&self) -> String {
        let tz = self.values.get("timezone").map_or("UTC", String::as_str);
        match parse_offset(tz) {
            Some(seconds) => {
                let iso = -seconds;
                let sign = if iso < 0 { '-' } else { '+' };
                let a = iso.unsigned_abs();
                format!("{sign}{:02}:{:02}", a / 3600, (a % 3600) / 60)
            }
            None => tz.to_string(),
        }
    }

    /// The schemas of `search_path`, in order (`$user` and empty entries left out).
    pub fn search_path(&self) -> Vec<String> {
        self.search_path_entries().map(str::to_string).collect()
    }

    /// The schemas of `search_path` in order, unquoted, without `$user` or empty entries.
    fn search_path_entries(&self) -> impl Iterator<Item = &str> {
        self.values
            .get("search_path")
            .into_iter()
            .flat_map(|s| s.split(','))
            .map(|p| p.trim().trim_matches('"'))
            .filter(|p| !p.is_empty() && *p != "$user")
    }

    /// The schema unqualified table names resolve to (the first of `search_path`, else
    /// `public`), as [`Settings::default_schema`] gives it.
    pub fn default_schema(&self) -> String {
        // The first entry alone (every statement asks: no list of them is built).
        self.search_path_entries()
            .next()
            .unwrap_or("public")
            .to_string()
    }

    /// The settings an engine needs: made when a setting changed since the last call, else
    /// the ones made then.
    pub fn engine_settings(&self) -> Arc<Settings> {
        made_for(&self.settings, &self.values, || self.make_settings())
    }

    fn make_settings(&self) -> Settings {
        let search_path = self.search_path();
        Settings {
            user: self.user.clone(),
            database: self.database.clone(),
            search_path: if search_path.is_empty() {
                vec!["public".into()]
            } else {
                search_path
            },
            time_zone: self.time_zone(),
            values: self.values.clone(),
            visible: None,
        }
    }

    /// Opens a cursor.
    ///
    /// # Errors
    /// [`Error::DuplicateCursor`] when the name is taken.
    pub fn declare(&mut self, name: &str, cursor: Cursor) -> Result<()> {
        if self.cursors.contains_key(name) {
            return Err(Error::DuplicateCursor {
                name: name.to_string(),
            });
        }
        self.cursors.insert(name.to_string(), cursor);
        Ok(())
    }

    /// The open cursor `name`.
    ///
    /// # Errors
    /// [`Error::CursorNotFound`].
    pub fn cursor(&mut self, name: &str) -> Result<&mut Cursor> {
        self.cursors
            .get_mut(name)
            .ok_or_else(|| Error::CursorNotFound {
                name: name.to_string(),
            })
    }

    /// The columns of open cursor `name`, if it is open.
    pub fn cursor_schema(&self, name: &str) -> Option<arrow::datatypes::SchemaRef> {
        self.cursors.get(name).map(|c| c.schema.clone())
    }

    /// Closes cursor `name` (`None`: all).
    ///
    /// # Errors
    /// [`Error::CursorNotFound`].
    pub fn close(&mut self, name: Option<&str>) -> Result<()> {
        match name {
            None => self.cursors.clear(),
            Some(n) => {
                self.cursors
                    .remove(n)
                    .ok_or_else(|| Error::CursorNotFound { name: n.into() })?;
            }
        }
        Ok(())
    }

    /// A transaction ended: cursors without `WITH HOLD` close, as in PostgreSQL.
    pub fn end_transaction(&mut self) {
        self.cursors.retain(|_, c| c.hold);
    }
}

/// Checks and normalises a value for a known setting.
fn normalize(name: &str, value: &str) -> Result<String> {
    // Drivers send some startup values quoted (asyncpg: client_encoding='utf-8').
    let value = value.trim();
    let value = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value);
    let invalid = |reason: &str| Error::InvalidSetting {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    match name {
        "timezone" => {
            let v = value.trim();
            if v.eq_ignore_ascii_case("utc") || v.eq_ignore_ascii_case("gmt") {
                return Ok("UTC".into());
            }
            if v.parse::<chrono_tz::Tz>().is_ok() || parse_offset(v).is_some() {
                Ok(v.to_string())
            } else {
                Err(invalid(
                    "use a time zone name such as UTC or Europe/Paris, or an offset such as +02:00",
                ))
            }
        }
        "client_encoding" => {
            let v = value.trim().to_ascii_uppercase().replace(['-', '_'], "");
            if v == "UTF8" || v == "UNICODE" {
                Ok("UTF8".into())
            } else {
                Err(invalid("lakegate speaks UTF8 only"))
            }
        }
        "extra_float_digits" => value
            .trim()
            .parse::<i8>()
            .ok()
            .filter(|n| (-15..=3).contains(n))
            .map(|n| n.to_string())
            .ok_or_else(|| invalid("an integer from -15 to 3")),
        "datestyle" => {
            if value.to_ascii_uppercase().contains("ISO") {
                Ok(value.to_string())
            } else {
                Err(invalid("only ISO date output is supported"))
            }
        }
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => {
            let ms = parse_millis(value)
                .ok_or_else(|| invalid("a duration such as 5000, 500ms, 5s or 1min"))?;
            Ok(if ms == 0 {
                "0".into()
            } else if ms % 1000 == 0 {
                format!("{}s", ms / 1000)
            } else {
                format!("{ms}ms")
            })
        }
        "lakegate.engine" => {
            let v = value.trim().to_ascii_lowercase();
            if ENGINE_NAMES.contains(&v.as_str()) {
                Ok(v)
            } else {
                Err(invalid(&format!("one of {}", ENGINE_NAMES.join(", "))))
            }
        }
        "default_transaction_read_only" | "transaction_read_only" => match value.trim() {
            "on" | "true" | "1" | "yes" => Ok("on".into()),
            _ => Err(invalid("lakegate is read-only")),
        },
        _ => Ok(value.to_string()),
    }
}

/// A PostgreSQL duration in milliseconds: a bare number is milliseconds; units ms, s, min, h, d.
pub fn parse_millis(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "" | "ms" => 1.0,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = number * factor;
    (ms.is_finite() && ms >= 0.0).then_some(ms as u64)
}

/// A `+HH:MM` / `-HH` offset, as accepted for `TimeZone`.
pub fn parse_offset(v: &str) -> Option<i32> {
    let (sign, rest) = match v.as_bytes().first()? {
        b'+' => (1, &v[1..]),
        b'-' => (-1, &v[1..]),
        _ => return None,
    };
    let mut parts = rest.split(':');
    let h: i32 = parts.next()?.parse().ok()?;
    let m: i32 = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    (h <= 15 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new("alice", "public")
    }

    #[test]
    fn engine_settings_are_made_again_after_a_setting_or_the_database_changes() {
        let mut s = Session::new("u", "public");
        let first = s.engine_settings();
        assert!(
            Arc::ptr_eq(&first, &s.engine_settings()),
            "kept while nothing changed"
        );
        s.set("search_path", "sales, public").expect("set");
        assert_eq!(s.engine_settings().search_path, vec!["sales", "public"]);
        s.set("TimeZone", "Europe/Paris").expect("set");
        assert_eq!(s.engine_settings().time_zone, "Europe/Paris");
        s.reset_all();
        assert_eq!(s.engine_settings().search_path, first.search_path);
        assert_eq!(s.engine_settings().time_zone, first.time_zone);
        let s = s.with_database("analytics");
        assert_eq!(s.engine_settings().database, "analytics");
        assert_eq!(s.engine_settings().user, "u");
    }

    #[test]
    fn formatting_is_made_again_after_a_setting_changes() {
        let mut s = Session::new("u", "public");
        let zone_of = |s: &Session| {
            s.formatting(|v| {
                let mut o = pgwire::types::format::FormatOptions::default();
                o.time_zone = v.get("timezone").cloned().unwrap_or_default();
                o
            })
        };
        let first = zone_of(&s);
        assert!(
            Arc::ptr_eq(&first, &zone_of(&s)),
            "kept while nothing changed"
        );
        s.set("TimeZone", "Europe/Paris").expect("set");
        let paris = zone_of(&s);
        assert_eq!(paris.time_zone, "Europe/Paris");
        s.reset_all();
        assert_eq!(zone_of(&s).time_zone, first.time_zone);
        s.set("DateStyle", "ISO, DMY").expect("set");
        assert!(
            !Arc::ptr_eq(&zone_of(&s), &first),
            "any setting makes them again"
        );
    }

    #[test]
    fn set_show_reset_round_trip() {
        let mut s = session();
        s.set("TimeZone", "Europe/Paris").expect("valid zone");
        assert_eq!(s.show("timezone").expect("known"), "Europe/Paris");
        assert_eq!(s.engine_settings().time_zone, "Europe/Paris");
        s.reset("TIMEZONE").expect("reset");
        assert_eq!(s.show("TimeZone").expect("known"), "UTC");
    }

    #[test]
    fn unknown_and_read_only_settings_are_refused() {
        let mut s = session();
        assert!(matches!(
            s.set("no_such_thing", "1"),
            Err(Error::UnknownSetting { .. })
        ));
        assert!(matches!(
            s.show("no_such_thing"),
            Err(Error::UnknownSetting { .. })
        ));
        assert!(matches!(
            s.set("server_version", "9"),
            Err(Error::ReadOnlySetting { .. })
        ));
        assert!(matches!(
            s.set("timezone", "Mars/Olympus"),
            Err(Error::InvalidSetting { .. })
        ));
        // dotted custom settings are allowed, as in PostgreSQL
        s.set("myapp.tenant", "42").expect("custom setting");
        assert_eq!(s.show("myapp.tenant").expect("set"), "42");
    }

    #[test]
    fn startup_options_become_the_reset_values() {
        let mut s = Session::new("bob", "public");
        s.apply_startup(&[("search_path".into(), "sales, public".into())])
            .expect("valid startup");
        assert_eq!(s.engine_settings().search_path, vec!["sales", "public"]);
        s.set("search_path", "other").expect("set");
        s.reset_all();
        assert_eq!(s.show("search_path").expect("known"), "sales, public");
    }

    #[test]
    fn statement_timeout_accepts_postgres_durations() {
        let mut s = session();
        assert_eq!(s.statement_timeout(), None);
        s.set("statement_timeout", "1500").expect("ms");
        assert_eq!(s.show("statement_timeout").expect("set"), "1500ms");
        assert_eq!(
            s.statement_timeout(),
            Some(std::time::Duration::from_millis(1500))
        );
        s.set("statement_timeout", "2s").expect("s");
        assert_eq!(s.show("statement_timeout").expect("set"), "2s");
        assert!(matches!(
            s.set("statement_timeout", "soon"),
            Err(Error::InvalidSetting { .. })
        ));
    }

    #[test]
    fn numeric_time_zones_read_as_posix_like_postgresql() {
        let mut s = session();
        s.set("TimeZone", "-03:30").expect("offset");
        assert_eq!(s.show("timezone").expect("set"), "-03:30");
        assert_eq!(s.time_zone(), "+03:30");
        s.set("TimeZone", "Europe/Paris").expect("name");
        assert_eq!(s.engine_settings().time_zone, "Europe/Paris");
    }

    #[test]
    fn offsets_parse() {
        assert_eq!(parse_offset("+02:00"), Some(7200));
        assert_eq!(parse_offset("-5"), Some(-18000));
        assert_eq!(parse_offset("5"), None);
    }
}

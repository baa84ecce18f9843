//! Routing groups and rules, from the TOML files of a rules folder (`routing-rules/`).
//!
//! A group lists candidate engines and its own limits (concurrency, queue, cache, staleness);
//! rules pick a group from who asks (user, `application_name`, client tag) and what is asked
//! (shape, tables, estimated scan bytes). Rules are tried by ascending `priority`, first match
//! wins, else the default group. Everything is checked at load: unknown engines, groups and
//! shapes, and rules an earlier rule makes unreachable are errors naming the file and rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::profile::{QueryProfile, Shape};
use crate::session::ENGINE_NAMES;

/// One routing group as written in a rules file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// The group's name (`SET lakegate.group`, rules' `group`).
    pub name: String,
    /// Candidate engines, in order of preference before anything is observed.
    pub engines: Vec<String>,
    /// Queries of this group running at once (default 8).
    #[serde(default = "default_concurrency")]
    pub max_concurrent: usize,
    /// Queries waiting for a slot; one more is refused with 53300 (default 32).
    #[serde(default = "default_queue")]
    pub queue_length: usize,
    /// Longest wait for a slot before refusing (default 10 s).
    #[serde(default = "default_queue_timeout", with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Results of this group are cached (default true).
    #[serde(default = "default_true")]
    pub cache: bool,
    /// Reuse a table's version for up to this long (default 0: check the catalog every time).
    #[serde(default, with = "humantime_serde")]
    pub max_staleness: Duration,
    /// Fraction of queries sent to a candidate that is not the predicted fastest, to keep
    /// learning (default 0.05).
    #[serde(default = "default_explore")]
    pub explore: f64,
    /// Sessions may choose this group with `SET lakegate.group` (default true).
    #[serde(default = "default_true")]
    pub selectable: bool,
    /// Guardrail: refuse, before running, a query whose estimated scan (Iceberg metadata,
    /// after partition and file pruning) is larger than this many bytes (0: no cap).
    #[serde(default)]
    pub max_scan_bytes: u64,
    /// Guardrail: end a query that returns more than this many rows (0: no limit).
    #[serde(default)]
    pub max_rows: u64,
    /// Guardrail: end a query whose result passes this many bytes (0: `[limits]`'s).
    #[serde(default)]
    pub max_result_bytes: u64,
}

fn default_concurrency() -> usize {
    8
}
fn default_queue() -> usize {
    32
}
fn default_queue_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_true() -> bool {
    true
}
fn default_explore() -> f64 {
    0.05
}

/// What a rule matches; every condition given must hold, absent ones match anything.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Conditions {
    /// Session users.
    pub users: Vec<String>,
    /// `application_name`s; a trailing `*` matches a prefix.
    pub applications: Vec<String>,
    /// Client tags (`lakegate.tag` startup parameter or `x-lakegate-tag` Flight header).
    pub tags: Vec<String>,
    /// Query shapes (`point_lookup`, `aggregate`, ...).
    pub shapes: Vec<String>,
    /// Tables (`schema.table`); the rule matches when the query reads any of them.
    pub tables: Vec<String>,
    /// Estimated scan bytes at least this.
    pub min_scan_bytes: Option<u64>,
    /// Estimated scan bytes at most this.
    pub max_scan_bytes: Option<u64>,
}

/// One rule as written in a rules file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The rule's name (in errors, `EXPLAIN ROUTE` and history).
    pub name: String,
    /// Lower runs first.
    #[serde(default)]
    pub priority: i64,
    /// The group it sends matching queries to.
    pub group: String,
    /// What it matches.
    #[serde(default, rename = "match")]
    pub conditions: Conditions,
}

/// One rules file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RulesFile {
    /// The group for queries no rule matches (one file may say; default: the first group).
    pub default_group: Option<String>,
    /// Groups.
    #[serde(rename = "group")]
    pub groups: Vec<GroupSpec>,
    /// Rules.
    #[serde(rename = "rule")]
    pub rules: Vec<RuleSpec>,
}

/// A rule with the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// As written.
    pub spec: RuleSpec,
    /// Where.
    pub file: PathBuf,
    shapes: Vec<Shape>,
}

/// Who asks, for rule matching.
#[derive(Debug, Clone, Default)]
pub struct Asker<'a> {
    /// The session user.
    pub user: &'a str,
    /// The session's `application_name`.
    pub application: &'a str,
    /// The client tag, if any.
    pub tag: &'a str,
}

/// The validated groups and rules in force.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingTable {
    /// Groups by name.
    pub groups: BTreeMap<String, GroupSpec>,
    /// Rules by priority (ties: file name, then position).
    pub rules: Vec<Rule>,
    /// The group for unmatched queries.
    pub default_group: String,
    /// What the load noticed but accepted (groups left without a configured engine).
    pub warnings: Vec<String>,
}

fn spec_engines(groups: &[GroupSpec], name: &str) -> Vec<String> {
    groups
        .iter()
        .find(|g| g.name == name)
        .map(|g| g.engines.clone())
        .unwrap_or_default()
}

impl RoutingTable {
    /// One group, `default`, with every configured engine: what runs without a rules folder.
    /// Its order of preference (what decides between engines about as fast): the in-memory
    /// copy when configured (it declines what it does not hold, at no cost), then the default
    /// engine, then the others.
    pub fn single_group(engines: &[&str], default_engine: &str) -> Self {
        let memory = lakegate_engines::datafusion_engine::ACCELERATED;
        let mut ordered: Vec<String> = engines
            .iter()
            .filter(|e| **e == memory && default_engine != memory)
            .map(|e| e.to_string())
            .collect();
        ordered.push(default_engine.to_string());
        ordered.extend(
            engines
                .iter()
                .filter(|e| **e != default_engine && **e != memory)
                .map(|e| e.to_string()),
        );
        let group = GroupSpec {
            name: "default".into(),
            engines: ordered,
            max_concurrent: 64,
            queue_length: 256,
            queue_timeout: default_queue_timeout(),
            cache: true,
            max_staleness: Duration::ZERO,
            explore: 0.0,
            selectable: true,
            max_scan_bytes: 0,
            max_rows: 0,
            max_result_bytes: 0,
        };
        Self {
            groups: BTreeMap::from([("default".to_string(), group)]),
            rules: vec![],
            default_group: "default".into(),
            warnings: vec![],
        }
    }

    /// Loads every `*.toml` in `dir` (sorted by name) and validates the whole.
    /// `configured` are the engines this gateway runs: a group keeps the configured ones among
    /// its candidates; a group with none left is an error.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file and the group or rule at fault.
    pub fn load(dir: &Path, configured: &[&str]) -> Result<Self> {
        let bad = |reason: String| Error::Config {
            setting: "routing.rules_dir".into(),
            reason,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| bad(format!("cannot read {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(bad(format!("no *.toml files in {}", dir.display())));
        }
        let mut parsed = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| bad(format!("{}: {e}", file.display())))?;
            let spec: RulesFile =
                toml::from_str(&text).map_err(|e| bad(format!("{}: {e}", file.display())))?;
            parsed.push((file, spec));
        }
        Self::build(parsed, configured)
    }

    /// Validates parsed files (see [`RoutingTable::load`]).
    ///
    /// # Errors
    /// As [`RoutingTable::load`].
    pub fn build(files: Vec<(PathBuf, RulesFile)>, configured: &[&str]) -> Result<Self> {
        let bad = |file: &Path, what: String| Error::Config {
            setting: "routing.rules_dir".into(),
            reason: format!("{}: {what}", file.display()),
        };
        let mut groups = BTreeMap::new();
        let mut default_group: Option<String> = None;
        let mut first_group: Option<String> = None;
        let mut rules = Vec::new();
        let mut warnings = Vec::new();
        for (file, spec) in &files {
            if let Some(d) = &spec.default_group {
                if let Some(prev) = &default_group
                    && prev != d
                {
                    return Err(bad(
                        file,
                        format!("default_group `{d}` contradicts `{prev}` set in another file"),
                    ));
                }
                default_group = Some(d.clone());
            }
            for g in &spec.groups {
                if groups.contains_key(&g.name) {
                    return Err(bad(file, format!("group `{}` is defined twice", g.name)));
                }
                if g.max_concurrent == 0 {
                    return Err(bad(
                        file,
                        format!("group `{}`: max_concurrent must be ≥ 1", g.name),
                    ));
                }
                if !(0.0..=1.0).contains(&g.explore) {
                    return Err(bad(
                        file,
                        format!("group `{}`: explore must be in 0..1", g.name),
                    ));
                }
                for e in &g.engines {
                    if !ENGINE_NAMES[1..].contains(&e.as_str()) {
                        return Err(bad(
                            file,
                            format!(
                                "group `{}`: unknown engine `{e}` (engines: {})",
                                g.name,
                                ENGINE_NAMES[1..].join(", ")
                            ),
                        ));
                    }
                }
                let mut g = g.clone();
                g.engines.retain(|e| configured.contains(&e.as_str()));
                if g.engines.is_empty() {
                    // The same rules serve an embedded-only gateway and a full estate.
                    let fallback = configured.first().copied().unwrap_or("datafusion");
                    warnings.push(format!(
                        "{}: group `{}`: none of {} is configured here; it runs on {fallback}",
                        file.display(),
                        g.name,
                        spec_engines(&spec.groups, &g.name).join(", ")
                    ));
                    g.engines = vec![fallback.to_string()];
                }
                first_group.get_or_insert_with(|| g.name.clone());
                groups.insert(g.name.clone(), g);
            }
        }
        for (file, spec) in &files {
            for (position, r) in spec.rules.iter().enumerate() {
                let shapes = r
                    .conditions
                    .shapes
                    .iter()
                    .map(|s| {
                        Shape::from_name(s).ok_or_else(|| {
                            bad(
                                file,
                                format!(
                                    "rule `{}`: unknown shape `{s}` (shapes: {})",
                                    r.name,
                                    Shape::ALL.map(Shape::name).join(", ")
                                ),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                if !groups.contains_key(&r.group) {
                    return Err(bad(
                        file,
                        format!("rule `{}`: unknown group `{}`", r.name, r.group),
                    ));
                }
                rules.push((
                    r.priority,
                    file.clone(),
                    position,
                    Rule {
                        spec: r.clone(),
                        file: file.clone(),
                        shapes,
                    },
                ));
            }
        }
        rules.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
        let rules: Vec<Rule> = rules.into_iter().map(|r| r.3).collect();
        for (i, later) in rules.iter().enumerate() {
            if let Some(earlier) = rules[..i].iter().find(|e| covers(e, later)) {
                return Err(bad(
                    &later.file,
                    format!(
                        "rule `{}` can never match: rule `{}` ({}) matches everything it does first",
                        later.spec.name,
                        earlier.spec.name,
                        earlier.file.display()
                    ),
                ));
            }
        }
        let default_group = default_group.or(first_group).ok_or_else(|| Error::Config {
            setting: "routing.rules_dir".into(),
            reason: "no [[group]] defined".into(),
        })?;
        if !groups.contains_key(&default_group) {
            return Err(Error::Config {
                setting: "routing.rules_dir".into(),
                reason: format!("default_group `{default_group}` is not a group"),
            });
        }
        for w in &warnings {
            tracing::warn!(warning = %w, "routing rules");
        }
        Ok(Self {
            groups,
            rules,
            default_group,
            warnings,
        })
    }

    /// The rule that matches (`None`: the default group applies).
    pub fn matching(&self, asker: &Asker<'_>, profile: &QueryProfile) -> Option<&Rule> {
        self.rules.iter().find(|r| r.matches(asker, profile))
    }
}

impl Rule {
    fn matches(&self, asker: &Asker<'_>, profile: &QueryProfile) -> bool {
        let c = &self.spec.conditions;
        let any = |list: &[String], value: &str| {
            list.is_empty()
                || list.iter().any(|p| match p.strip_suffix('*') {
                    Some(prefix) => value.starts_with(prefix),
                    None => p == value,
                })
        };
        let bytes = profile.scan_bytes.unwrap_or(0);
        any(&c.users, asker.user)
            && any(&c.applications, asker.application)
            && any(&c.tags, asker.tag)
            && (self.shapes.is_empty() || self.shapes.contains(&profile.shape))
            && (c.tables.is_empty()
                || profile
                    .tables
                    .iter()
                    .any(|(s, t)| c.tables.iter().any(|x| *x == format!("{s}.{t}"))))
            && c.min_scan_bytes.is_none_or(|m| bytes >= m)
            && c.max_scan_bytes.is_none_or(|m| bytes <= m)
    }
}

/// Whether `earlier` matches every query `later` matches (so `later` is unreachable).
fn covers(earlier: &Rule, later: &Rule) -> bool {
    let (e, l) = (&earlier.spec.conditions, &later.spec.conditions);
    let list = |e: &[String], l: &[String]| {
        e.is_empty() || (!l.is_empty() && l.iter().all(|x| e.contains(x)))
    };
    let shapes = earlier.shapes.is_empty()
        || (!later.shapes.is_empty() && later.shapes.iter().all(|s| earlier.shapes.contains(s)));
    list(&e.users, &l.users)
        && list(&e.applications, &l.applications)
        && list(&e.tags, &l.tags)
        && list(&e.tables, &l.tables)
        && shapes
        && e.min_scan_bytes
            .is_none_or(|m| l.min_scan_bytes.is_some_and(|x| x >= m))
        && e.max_scan_bytes
            .is_none_or(|m| l.max_scan_bytes.is_some_and(|x| x <= m))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&str] = &["datafusion", "duckdb", "trino", "spark"];

    fn table(text: &str, configured: &[&str]) -> Result<RoutingTable> {
        let spec: RulesFile = toml::from_str(text).expect("toml");
        RoutingTable::build(vec![(PathBuf::from("r.toml"), spec)], configured)
    }

    fn profile(shape: Shape, tables: &[(&str, &str)], bytes: u64) -> QueryProfile {
        QueryProfile {
            shape,
            tables: tables
                .iter()
                .map(|(s, t)| (s.to_string(), t.to_string()))
                .collect(),
            filter_columns: vec![],
            join_columns: vec![],
            group_columns: vec![],
            limit: None,
            scan_bytes: Some(bytes),
        }
    }

    const RULES: &str = r#"
        default_group = "app"
        [[group]]
        name = "app"
        engines = ["duckdb", "datafusion"]
        [[group]]
        name = "dashboards"
        engines = ["trino", "duckdb"]
        [[group]]
        name = "reprocess"
        engines = ["spark"]
        [[rule]]
        name = "grafana"
        priority = 1
        group = "dashboards"
        match = { applications = ["Grafana*"] }
        [[rule]]
        name = "big scans"
        priority = 2
        group = "reprocess"
        match = { min_scan_bytes = 1000000000 }
        [[rule]]
        name = "orders aggregates"
        priority = 3
        group = "dashboards"
        match = { shapes = ["aggregate", "join"], tables = ["public.orders"] }
    "#;

    #[test]
    fn first_matching_rule_by_priority_wins() {
        let t = table(RULES, ALL).expect("valid");
        let asker = |app| Asker {
            user: "u",
            application: app,
            tag: "",
        };
        let agg = profile(Shape::Aggregate, &[("public", "orders")], 10);
        assert_eq!(
            t.matching(&asker("Grafana 11"), &agg)
                .map(|r| r.spec.name.as_str()),
            Some("grafana")
        );
        assert_eq!(
            t.matching(&asker("psql"), &agg)
                .map(|r| r.spec.name.as_str()),
            Some("orders aggregates")
        );
        let big = profile(Shape::Aggregate, &[("public", "orders")], 5_000_000_000);
        assert_eq!(
            t.matching(&asker("psql"), &big)
                .map(|r| r.spec.name.as_str()),
            Some("big scans")
        );
        let lookup = profile(Shape::PointLookup, &[("public", "orders")], 10);
        assert!(t.matching(&asker("psql"), &lookup).is_none());
        assert_eq!(t.default_group, "app");
    }

    #[test]
    fn unconfigured_engines_drop_out_and_empty_groups_fall_back() {
        let t = table(RULES, &["datafusion", "duckdb"]).expect("valid");
        assert_eq!(t.groups["dashboards"].engines, vec!["duckdb"]);
        assert_eq!(t.groups["reprocess"].engines, vec!["datafusion"]);
        assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
        assert!(t.warnings[0].contains("reprocess") && t.warnings[0].contains("r.toml"));
    }

    #[test]
    fn bad_rules_name_the_file_and_rule() {
        let unknown_engine = RULES.replace(r#"engines = ["spark"]"#, r#"engines = ["oracle"]"#);
        let err = table(&unknown_engine, ALL).expect_err("oracle");
        assert!(err.to_string().contains("unknown engine `oracle`"), "{err}");

        let unreachable = format!(
            "{RULES}\n[[rule]]\nname = \"shadowed\"\npriority = 9\ngroup = \"app\"\nmatch = {{ applications = [\"Grafana*\"], shapes = [\"scan\"] }}\n"
        );
        let err = table(&unreachable, ALL).expect_err("shadowed");
        assert!(
            err.to_string().contains("rule `shadowed` can never match"),
            "{err}"
        );
        assert!(err.to_string().contains("grafana"), "{err}");

        let unknown_group = RULES.replace(r#"group = "reprocess""#, r#"group = "nope""#);
        let err = table(&unknown_group, ALL).expect_err("group");
        assert!(err.to_string().contains("unknown group `nope`"), "{err}");

        let bad_shape = RULES.replace(r#""aggregate", "join""#, r#""aggregate", "blob""#);
        let err = table(&bad_shape, ALL).expect_err("shape");
        assert!(err.to_string().contains("unknown shape `blob`"), "{err}");
    }

    #[test]
    fn the_example_rules_folder_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../routing-rules");
        let t = RoutingTable::load(&dir, ALL).expect("routing-rules/ examples are valid");
        assert!(t.groups.len() >= 3, "{:?}", t.groups.keys());
    }
}

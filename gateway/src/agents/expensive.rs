//! Which statements are expensive for an agent, decided from the plan before anything runs:
//! an estimated scan above `expensive_scan_bytes`, a scan above `unfiltered_scan_bytes` with
//! no filter at all, or a join of tables with no join condition (a cross join). The policy's
//! [`Expensive`] says what happens then.

use serde::{Deserialize, Serialize};

use super::Limits;
use crate::profile::QueryProfile;

/// What the policy does with an expensive statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expensive {
    /// Refuse it (54000), saying why and how to make it cheaper.
    #[default]
    Refuse,
    /// Hold it until an admin approves it (or rejects it, or the wait runs out).
    Approve,
    /// Run it like any other.
    Allow,
}

/// Why a statement is expensive, in words with the numbers; `None`: it is not.
pub fn reason(profile: &QueryProfile, scan_bytes: u64, limits: &Limits) -> Option<String> {
    let human = lakegate_engines::units::human_bytes;
    if limits.expensive_scan_bytes > 0 && scan_bytes > limits.expensive_scan_bytes {
        return Some(format!(
            "estimated scan of {} is above this agent's expensive_scan_bytes ({})",
            human(scan_bytes),
            human(limits.expensive_scan_bytes)
        ));
    }
    if profile.filter_columns.is_empty()
        && limits.unfiltered_scan_bytes > 0
        && scan_bytes > limits.unfiltered_scan_bytes
    {
        return Some(format!(
            "it reads {} with no filter, above this agent's unfiltered_scan_bytes ({})",
            human(scan_bytes),
            human(limits.unfiltered_scan_bytes)
        ));
    }
    if profile.tables.len() > 1 && profile.join_columns.is_empty() {
        return Some(format!(
            "it joins {} tables with no join condition (a cross join)",
            profile.tables.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{self, StatementKind};

    fn profile(sql: &str) -> QueryProfile {
        let statement = crate::service::parse::Parser::new(14)
            .parse(sql)
            .expect("parses")
            .remove(0);
        let refs = classify::references(&statement, "public").expect("refs");
        QueryProfile::of(&statement, &StatementKind::Query, &refs)
    }

    #[test]
    fn big_scans_unfiltered_scans_and_cross_joins_are_expensive() {
        let limits = Limits {
            expensive_scan_bytes: 1000,
            unfiltered_scan_bytes: 100,
            ..Limits::default()
        };
        let filtered = profile("SELECT * FROM s.t WHERE id = 1");
        assert_eq!(reason(&filtered, 500, &limits), None);
        let big = reason(&filtered, 5000, &limits).expect("big");
        assert!(big.contains("expensive_scan_bytes"), "{big}");
        let all = profile("SELECT * FROM s.t");
        assert_eq!(reason(&all, 50, &limits), None, "small enough unfiltered");
        assert!(
            reason(&all, 500, &limits)
                .expect("unfiltered")
                .contains("no filter")
        );
        let cross = profile("SELECT * FROM s.a, s.b WHERE s.a.x > 1");
        assert!(
            reason(&cross, 10, &limits)
                .expect("cross")
                .contains("cross join")
        );
        let joined = profile("SELECT * FROM s.a JOIN s.b ON s.a.id = s.b.id WHERE s.a.x > 1");
        assert_eq!(reason(&joined, 10, &limits), None);
    }
}

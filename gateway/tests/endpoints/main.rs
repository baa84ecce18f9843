//! The gateway's endpoints end to end, one test binary (each links everything; the
//! warehouse is made once for both): the real `lakegate` binary on ephemeral ports, over the
//! Postgres wire (`pg_wire`) and Flight SQL (`flight_sql`).

mod common;
mod flight_sql;
mod pg_wire;

//! The `psql` command line run in a member through `pods/exec`, and the SQL a later step's
//! failover sends and reads back: recovery or not, WAL positions, a promotion. Support: a learner
//! may skip it on first read — stage 04 runs `psql` only for `/metrics` (`figures.rs`), and how a
//! command reaches a pod is `src/exec.rs`'s.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: watching the operator").

/// `psql` as `pods/exec` runs it in the postgres container: over the Unix socket (no `-h`), as
/// the superuser `postgres`, which the image's pg_hba.conf trusts on local connections, so no
/// password is needed. `-v ON_ERROR_STOP=1`: an SQL error is a non-zero exit status; `-A -t`:
/// bare values, `|` between columns; `-X`: no `~/.psqlrc`.
pub fn psql_argv(sql: &str) -> Vec<String> {
    [
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-AtX",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-c",
        sql,
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect()
}

/// In a standby's postgres container: have the server restart its WAL receiver, which then
/// connects through the primary Service afresh. Why a failover needs it: a receiver that
/// connected to a primary frozen since (its TCP handshake is the kernel's) waits for an answer
/// for ever; `wal_receiver_timeout` bounds a stream, not a connection attempt. Since PostgreSQL
/// 13 a reload that changes `primary_conninfo` restarts the receiver; a space added at its end
/// (or taken off again) changes the setting, not what libpq reads from it. Not a signal to the
/// receiver's pid: `pg_stat_wal_receiver` shows none before it has connected, and
/// `pg_terminate_backend` refuses an auxiliary process. `ALTER SYSTEM` writes
/// `postgresql.auto.conf`, where `pg_basebackup -R` put the setting; it cannot run in a
/// transaction block, hence psql's `\gexec` rather than a `DO` block.
pub fn restart_wal_receiver_argv() -> Vec<String> {
    let sql = "SELECT format('ALTER SYSTEM SET primary_conninfo = %L', \
               CASE WHEN right(setting, 1) = ' ' THEN rtrim(setting) ELSE setting || ' ' END) \
               FROM pg_settings WHERE name = 'primary_conninfo' AND setting <> '' \\gexec\n\
               SELECT pg_reload_conf();";
    let script =
        format!("psql -v ON_ERROR_STOP=1 -AtX -U postgres -d postgres <<'SQL'\n{sql}\nSQL\n");
    vec!["sh".into(), "-c".into(), script]
}

/// `t` on a replica (a standby replaying WAL), `f` on a primary.
pub const IS_IN_RECOVERY_SQL: &str = "SELECT pg_is_in_recovery()";
/// On a replica: the WAL position received from the primary, then the one replayed (either is
/// empty, SQL NULL, before the standby has received or replayed anything). Parse with
/// [`ReplicaLsns::parse`].
pub const REPLICA_LSNS_SQL: &str = "SELECT pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()";
/// On a primary: where its WAL ends now. (On a standby this is an error.)
pub const CURRENT_WAL_LSN_SQL: &str = "SELECT pg_current_wal_lsn()";
/// On a replica: end recovery and become a primary on a new timeline. Waits up to 25 s for the
/// promotion to finish and prints `t` if it did, `f` if not: inside the exec's own 30 s limit
/// (`ExecLimits::default`), so that a slow promotion is said as one, not as a failed exec. The
/// server goes on promoting either way; the next round finds the replica promoted.
pub const PROMOTE_SQL: &str = "SELECT pg_promote(true, 25)";

/// Output of one of the queries above that is not what the query prints.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PsqlOutputError {
    #[error("{text:?} is not a WAL position (an LSN looks like 0/3000148)")]
    NotAnLsn { text: String },
    #[error("{text:?} is not a boolean (psql prints t or f)")]
    NotABool { text: String },
    #[error("expected {expected} columns separated by '|', got {text:?}")]
    Columns { expected: usize, text: String },
}

/// `0/3000148` → 0x0000_0000_0300_0148. An LSN is a 64-bit byte position in the WAL, printed
/// as two 32-bit halves in hex; compare the numbers, never the text (`0/A` > `0/9`).
pub fn parse_lsn(text: &str) -> Result<u64, PsqlOutputError> {
    let not_an_lsn = || PsqlOutputError::NotAnLsn {
        text: text.to_string(),
    };
    let (high, low) = text.trim().split_once('/').ok_or_else(not_an_lsn)?;
    let half = |part: &str| {
        // from_str_radix alone would also take a leading `+`.
        if part.is_empty() || part.len() > 8 || !part.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(not_an_lsn());
        }
        u32::from_str_radix(part, 16).map_err(|_| not_an_lsn())
    };
    Ok((u64::from(half(high)?) << 32) | u64::from(half(low)?))
}

/// psql's `t` or `f`.
pub fn parse_bool(text: &str) -> Result<bool, PsqlOutputError> {
    match text.trim() {
        "t" => Ok(true),
        "f" => Ok(false),
        _ => Err(PsqlOutputError::NotABool {
            text: text.to_string(),
        }),
    }
}

/// How far a replica has got, from [`REPLICA_LSNS_SQL`]. Ordered by what was received, then by
/// what was replayed (`None`, nothing yet, comes first): the greatest is the replica to
/// promote, because it lost the least of the old primary's WAL, and a replica ahead of the new
/// primary could not follow its timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReplicaLsns {
    pub received: Option<u64>,
    pub replayed: Option<u64>,
}

impl ReplicaLsns {
    /// `0/3000148|0/3000148` (psql `-At`; an empty column is NULL).
    pub fn parse(output: &str) -> Result<ReplicaLsns, PsqlOutputError> {
        let columns: Vec<&str> = output.trim().split('|').collect();
        let [received, replayed] = columns[..] else {
            return Err(PsqlOutputError::Columns {
                expected: 2,
                text: output.to_string(),
            });
        };
        let lsn = |text: &str| (!text.is_empty()).then(|| parse_lsn(text)).transpose();
        Ok(ReplicaLsns {
            received: lsn(received)?,
            replayed: lsn(replayed)?,
        })
    }
}

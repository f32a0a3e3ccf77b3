//! Support: skip it on first read — part of leader election, which one replica never needs.
//!
//! The leader's term, and the fence each member keeps with it. The gate (`gate.rs`) is checked
//! in this process, so a pause between its check and the request reaching the member defeats
//! it. Kubernetes enforces no precondition on a `pods/exec`, and a `resourceVersion`
//! precondition guards only the object written. So the fence lives in the member: every command
//! a leader runs there passes a small shell that keeps the highest term it has seen in a file on
//! the member's data volume, raises it to ours, and refuses a lower one. The new leader asks every
//! candidate before it promotes one, which raises the fence on each; a command of the old leader
//! arriving after that is refused there, however long it was on its way. Under `flock`, a raise
//! waits for a command of an earlier term still running, so it cannot fall between that
//! command's check and its act.
//!
//! WORKSHOP.md, step 05 ("Two operators, one pause").

use std::time::UNIX_EPOCH;

use super::lease::Lease;
use crate::events::parse_utc;

/// What the fence's shell exits with when it refuses (`EX_TEMPFAIL`): psql's own exit codes
/// are 0 to 3, so this one cannot be mistaken for an answer of Postgres.
pub const FENCED_EXIT: i32 = 75;

/// The file, in `dir`, that holds the highest term a member has seen.
pub const TERM_FILE: &str = "operator-term";

/// The term of the leadership `lease` records: its creation time on the API server's clock, in
/// seconds, then how many times it changed hands. A Lease deleted and created again counts its
/// transitions from 0 again, but its creation time is later, so its term still outranks every
/// term of the one before.
pub fn term(lease: &Lease) -> u64 {
    let created = lease
        .metadata
        .creation_timestamp
        .as_deref()
        .and_then(parse_utc)
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_secs());
    let transitions = lease.spec.lease_transitions.unwrap_or(0).clamp(0, 999_999) as u64;
    created * 1_000_000 + transitions
}

/// `argv` run under the fence of term `term`, its file in `dir` (on the member's data volume,
/// which outlives a restart of its container). The shell takes a shared lock, reads the member's
/// term, and runs `argv` holding that lock if ours is not lower. When ours is higher it first
/// takes the lock alone and writes ours; a command of an earlier term still running holds its
/// shared lock until it ends, so the raise waits for it.
pub fn fenced_argv(term: u64, dir: &str, argv: &[String]) -> Vec<String> {
    let script = format!(
        r#"f="$1/{TERM_FILE}"; T="$2"; shift 2
fail() {{ echo "$1" >&2; exit {FENCED_EXIT}; }}
exec 9>>"$f.lock" || fail "cannot open $f.lock"
seen() {{ flock "$1" 9 || fail "cannot lock $f.lock"; t=$(cat "$f" 2>/dev/null); case "$t" in ''|*[!0-9]*) t=0;; esac; }}
seen -s
if [ "$t" -lt "$T" ]; then
  seen -x
  if [ "$t" -lt "$T" ]; then {{ echo "$T" > "$f.new" && mv "$f.new" "$f"; }} || fail "cannot write $f"; fi
  seen -s
fi
[ "$t" -gt "$T" ] && fail "this member has seen leader term $t, later than ours ($T): another operator leads now"
exec "$@""#
    );
    let mut fenced = vec![
        "sh".to_string(),
        "-c".to_string(),
        script,
        "fence".to_string(),
        dir.to_string(),
        term.to_string(),
    ];
    fenced.extend(argv.iter().cloned());
    fenced
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::LeaseSpec;
    use std::process::Command;

    fn lease(created: Option<&str>, transitions: Option<i64>) -> Lease {
        let mut lease = Lease {
            spec: LeaseSpec {
                lease_transitions: transitions,
                ..LeaseSpec::default()
            },
            ..Lease::default()
        };
        lease.metadata.creation_timestamp = created.map(String::from);
        lease
    }

    #[test]
    fn a_term_is_the_creation_second_then_the_transitions() {
        let first = term(&lease(Some("2026-11-29T14:35:29Z"), Some(3)));
        assert_eq!(first, 1_795_962_929_000_003);
        // Deleted and created again a second later: transitions from 0, and still later.
        let again = term(&lease(Some("2026-11-29T14:35:30Z"), Some(0)));
        assert!(again > first);
        assert_eq!(term(&lease(None, Some(2))), 2);
    }

    /// The shell as a member runs it, with `echo` standing for psql: a first term is written,
    /// a later one raises it, an earlier one is refused and its command never runs.
    #[test]
    fn the_fence_keeps_the_highest_term_and_refuses_a_lower_one() {
        let dir = std::env::temp_dir().join(format!("fence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let dir_text = dir.to_str().expect("utf-8 temp dir");
        let run = |term: u64| {
            let argv = fenced_argv(term, dir_text, &["echo".into(), "ran".into()]);
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .output()
                .expect("sh runs");
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            (out.status.code(), stdout, stderr)
        };
        let held = || std::fs::read_to_string(dir.join(TERM_FILE)).expect("term file");
        let (first, later) = (1_795_962_929_000_005, 1_795_962_929_000_007);
        assert_eq!(run(first), (Some(0), "ran".into(), String::new()));
        assert_eq!(held().trim(), first.to_string());
        assert_eq!(run(first).0, Some(0), "the same term passes");
        assert_eq!(run(later).0, Some(0));
        assert_eq!(held().trim(), later.to_string());
        let (code, stdout, stderr) = run(later - 1);
        assert_eq!(code, Some(FENCED_EXIT));
        assert_eq!(stdout, "", "a refused command never runs");
        let why = format!("seen leader term {later}, later than ours ({})", later - 1);
        assert!(stderr.contains(&why), "{stderr}");
        assert_eq!(
            held().trim(),
            later.to_string(),
            "a refusal leaves the term as it was"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

//! The shell a learner reads in step 06: the `archive_command` PostgreSQL runs for every finished
//! WAL segment, the `restore_command` that fetches one back, the backup pod's script
//! (`pg_basebackup` into the claim, the oldest pruned) and the restore container's (the newest
//! base backup unpacked into an empty PGDATA). They run in the official postgres image, with its
//! tools and nothing else.
//!
//! WORKSHOP.md, step 06 ("What goes where").

/// `archive_command`, run by the primary's archiver (with `sh -c`) for each finished segment
/// `%p` (its path, relative to PGDATA) named `%f`. Archiving must be atomic and must never
/// overwrite: a copy to a temporary name, fsynced (PostgreSQL recycles the segment as soon as
/// this returns 0), then renamed. A file of the same name that is identical is success: after a
/// failover or a crash the same segment can be archived twice. A different one is a failure
/// (exit 1), which PostgreSQL retries and reports in `pg_stat_archiver`, keeping the segment.
pub fn archive_command(dir: &str) -> String {
    // One way to compress, for the copy and for the comparison: gzip records its level in the
    // header, so the same segment compressed at another level would never compare equal.
    let gzip = "gzip -n -1 -c %p";
    format!(
        "f={dir}/wal/%f.gz; if [ -f \"$f\" ]; then {gzip} | cmp -s - \"$f\"; \
         else mkdir -p {dir}/wal && {gzip} > \"$f.tmp\" && sync \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; fi"
    )
}

/// `restore_command`: fetch `%f` from the archive into `%p`. Exit non-zero for a file that is not
/// there: that is how recovery learns it has reached the end of the archive (and, with
/// `recovery_target_timeline = 'latest'`, which timelines exist).
pub fn restore_command(dir: &str) -> String {
    format!("f={dir}/wal/%f.gz; [ -f \"$f\" ] && gunzip -c \"$f\" > %p")
}

/// Shell functions both scripts use: WAL file names from LSNs, and failing with a message.
const SCRIPT_FUNCTIONS: &str = r#"fail() {
  echo "$*" >&2
  # The kubelet copies this file into the pod's status (state.terminated.message).
  echo "$*" > /dev/termination-log || true
  exit 1
}
# A WAL segment's number from an LSN X/Y, for the default 16 MB segments (wal_segment_size is
# fixed at initdb): X * 256 + Y / 16 MB.
segno() {
  hi=${1%/*}; lo=${1#*/}
  echo $(( 0x$hi * 256 + (0x$lo >> 24) ))
}
# The segment holding the last byte before LSN X/Y: a backup's End-LSN is where its WAL stops,
# and one on a segment boundary (0/4000000, as a backup from a replica often ends after a switch)
# needs nothing of the segment that starts there (PostgreSQL's XLByteToPrevSeg).
segno_before() {
  hi=${1%/*}; lo=${1#*/}
  echo $(( (0x$hi * 4294967296 + 0x$lo - 1) >> 24 ))
}
# A WAL file name: timeline, then the segment number as two 8-digit hex halves.
segment() {
  printf '%08X%08X%08X\n' "$1" $(( $2 / 256 )) $(( $2 % 256 ))
}
# backup_manifest (PostgreSQL 13+) lists the WAL range a backup needs, one line per timeline:
# { "Timeline": 1, "Start-LSN": "0/2000028", "End-LSN": "0/2000100" }
manifest_field() {
  sed -n "s/.*\"$2\": *\"\{0,1\}\([0-9A-F]*\/\{0,1\}[0-9A-F]*\)\"\{0,1\}.*/\1/p" "$1"
}
"#;

/// The backup pod's script: a base backup into a side directory, renamed when it is complete
/// and its WAL archived, then the old ones pruned.
const BACKUP_SCRIPT: &str = r#"set -eu
base=/backups/base
wal=/backups/wal
mkdir -p "$base" "$wal"
# One backup pod runs at a time (the operator sees to it): leftovers of one that died are junk.
rm -rf "$base"/.partial-*
partial="$base/.partial-$POD_NAME"
# -Ft: one tar per tablespace plus backup_manifest; -X none: no WAL in the backup, the archive
# has it; -c fast: checkpoint now. From a replica, the primary does not slow down for the copy.
# A Service routes only to ready pods, and its endpoints follow a pod's readiness a moment
# later: a replica that has just become ready may not be reachable through it yet.
waited=0
until pg_isready -q -h "$SOURCE_HOST" -p 5432; do
  [ "$waited" -lt 60 ] || fail "$SOURCE_HOST:5432 did not answer for 60s (pg_isready)"
  echo "backup: waiting for $SOURCE_HOST:5432"
  sleep 2
  waited=$((waited + 2))
done
# Its stderr is kept aside so that the failure names pg_basebackup's own words.
status=0
pg_basebackup -h "$SOURCE_HOST" -p 5432 -U replicator -d "application_name=$POD_NAME" \
  -D "$partial" -Ft -X none -c fast 2> "$partial.err" || status=$?
cat "$partial.err" >&2
[ "$status" -eq 0 ] || fail "pg_basebackup from $SOURCE_HOST failed (exit $status): $(grep -v '^NOTICE' "$partial.err" | tail -n 1)"
rm -f "$partial.err"
start_lsn=$(manifest_field "$partial/backup_manifest" Start-LSN | head -n 1)
end_lsn=$(manifest_field "$partial/backup_manifest" End-LSN | tail -n 1)
timeline=$(manifest_field "$partial/backup_manifest" Timeline | tail -n 1)
[ -n "$start_lsn" ] && [ -n "$end_lsn" ] || fail "$partial/backup_manifest: no WAL range"
# The backup is usable once the WAL up to its end is archived. Ask the primary to finish its
# segment now rather than within archive_timeout.
PGPASSWORD="$SUPERUSER_PASSWORD" psql -h "$PRIMARY_HOST" -p 5432 -U postgres -d postgres -AtXq \
  -c "SELECT pg_switch_wal()" > /dev/null || echo "backup: could not switch WAL on $PRIMARY_HOST; waiting for archive_timeout"
last=$(segment "$timeline" "$(segno_before "$end_lsn")")
waited=0
until [ -f "$wal/$last.gz" ]; do
  [ "$waited" -lt "$ARCHIVE_WAIT" ] || fail "$wal/$last.gz: not archived ${ARCHIVE_WAIT}s after the backup; see pg_stat_archiver on the primary"
  sleep 1
  waited=$((waited + 1))
done
now=$(date -u +%s)
name="$(date -u -d "@$now" +%Y%m%dT%H%M%SZ)-$(echo "$start_lsn" | tr / _)"
mv "$partial" "$base/$name"
bytes=$(du -sb "$base/$name" | cut -f1)
# Keep the newest $KEEP (this one among them), then the WAL from the oldest kept one's start.
ls -1 "$base" | grep -v '^\.' | sort -r | tail -n +$((KEEP + 1)) | while read -r old; do
  rm -rf "${base:?}/$old"
  echo "backup: pruned $old"
done
oldest=$(ls -1 "$base" | grep -v '^\.' | sort | head -n 1)
oldest_lsn=$(manifest_field "$base/$oldest/backup_manifest" Start-LSN | head -n 1)
oldest_timeline=$(manifest_field "$base/$oldest/backup_manifest" Timeline | head -n 1)
# Removes every segment before that one, whatever its timeline; .history files stay.
pg_archivecleanup -x .gz "$wal" "$(segment "$oldest_timeline" "$(segno "$oldest_lsn")")"
result="backup-done name=$name time=$(date -u -d "@$now" +%Y-%m-%dT%H:%M:%SZ) lsn=$start_lsn bytes=$bytes"
echo "$result"
# The operator reads it from the pod's status: the kubelet copies this file there.
echo "$result" > /dev/termination-log
"#;

/// The restoring seed's init container: the newest base backup (completed before the target
/// time, if one is given) unpacked into PGDATA, checked, and `recovery.signal` written. The
/// server then replays the archive with `restore_command` and promotes at its end (or target).
const RESTORE_SCRIPT: &str = r#"set -eu
# Init containers run again when the pod restarts; the database restored then is kept.
if [ -s "$PGDATA/PG_VERSION" ]; then
  echo "restore: $PGDATA already holds a database; keeping it"
  exit 0
fi
# Names start with their completion time (20260122T101500Z-0_3000028): sorted, newest last.
backup=$(ls -1 "$SOURCE/base" 2>/dev/null | grep -v '^\.' | awk -v t="${TARGET_STAMP:-}" 't == "" || $0 < t' | sort | tail -n 1)
[ -n "$backup" ] || fail "$SOURCE/base: no base backup${TARGET_TIME:+ completed before $TARGET_TIME}"
dir="$SOURCE/base/$backup"
partial="$PGDATA.partial"
rm -rf "$partial"
mkdir -m 700 "$partial"
tar -xf "$dir/base.tar" -C "$partial" || fail "$dir/base.tar: not a readable tar archive (tar exit $?)"
# Every file against the checksums pg_basebackup wrote (-n: there is no WAL in the backup).
pg_verifybackup -n -q -m "$dir/backup_manifest" "$partial" || fail "$dir: the files do not match $dir/backup_manifest (pg_verifybackup exit $?)"
# Every segment from the backup's start to the newest archived must be there: recovery stops at
# the first missing one and promotes, silently dropping everything after it.
timeline=$(manifest_field "$dir/backup_manifest" Timeline | head -n 1)
first=$(segno "$(manifest_field "$dir/backup_manifest" Start-LSN | head -n 1)")
expected=$first
for number in $(ls -1 "$SOURCE/wal" | sed -n 's/^\([0-9A-F]\{8\}\)\([0-9A-F]\{8\}\)\([0-9A-F]\{8\}\)\.gz$/\2 \3/p' \
    | while read -r hi lo; do echo $(( 0x$hi * 256 + 0x$lo )); done | sort -n -u); do
  [ "$number" -ge "$first" ] || continue
  [ "$number" -eq "$expected" ] || fail "$SOURCE/wal/$(segment "$timeline" "$expected").gz is missing (the archive goes on at $(segment "$timeline" "$number")): replay would stop there"
  expected=$((expected + 1))
done
[ "$expected" -gt "$first" ] || fail "$SOURCE/wal/$(segment "$timeline" "$first").gz is missing: base backup $backup starts there"
# A backup taken from a replica carries its standby.signal: with it the server would stay a
# standby forever instead of recovering and promoting.
rm -f "$partial/standby.signal"
touch "$partial/recovery.signal"
rm -rf "$PGDATA"
mv "$partial" "$PGDATA"
echo "restore: $backup unpacked into $PGDATA; postgres replays $SOURCE/wal from segment $(segment "$timeline" "$first")"
"#;

/// The full text of a script: the shared functions, then the body.
pub(super) fn script(body: &str) -> String {
    let (first, rest) = body.split_once('\n').unwrap_or((body, ""));
    format!("{first}\n{SCRIPT_FUNCTIONS}{rest}")
}

/// The backup pod's script with its functions, for the pod spec.
pub(super) fn backup_script() -> String {
    script(BACKUP_SCRIPT)
}

/// The restore script with its functions, for the pod spec.
pub fn restore_script() -> String {
    script(RESTORE_SCRIPT)
}

//! Support: skip it on first read — what `kubectl describe` shows; nothing the operator decides
//! depends on it.
//!
//! Kubernetes Events: the lines `kubectl describe pgc NAME` shows under "Events:", written by
//! the operator for every action it takes on a cluster.
//!
//! WORKSHOP.md, step 04 ("Telling the user"). An Event is an ordinary core/v1 object in the
//! cluster's namespace; `involvedObject` names the cluster *with its uid*, which is how
//! `kubectl describe` finds the events of this cluster and not of an older one under the same
//! name. Events are best effort: the API server may drop them (they expire after an hour by
//! default), so nothing may depend on reading them back, and failing to write one is logged, never
//! fatal.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::api::PostgresCluster;
use crate::client::Client;
use crate::resource::Resource;

/// Who the events about a PostgresCluster say wrote them (`kubectl describe`'s "From" column):
/// each kind's [`Resource::OPERATOR`].
pub const COMPONENT: &str = <PostgresCluster as Resource>::OPERATOR;

/// `Normal` for what the operator did as planned, `Warning` for what a user should look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Record one event about `cluster`. `reason` is a short UpperCamelCase word (`Promoted`);
/// `message` a sentence for humans.
pub async fn record<K: Resource>(
    client: &Client,
    cluster: &K,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let namespace = &cluster.metadata().namespace;
    let event = event_object(cluster, kind, reason, message, &rfc3339(SystemTime::now()));
    let path = format!("/api/v1/namespaces/{namespace}/events");
    if let Err(error) = client.create::<_, serde_json::Value>(&path, &event).await {
        tracing::warn!(%error, %reason, "could not record an event");
    }
}

/// The Event object. `generateName` from the cluster's name, as client-go's recorder names them
/// `<object>.<random>`; `firstTimestamp`/`lastTimestamp` and `count` are what `kubectl describe`
/// reads for its "Age" column.
pub fn event_object<K: Resource>(
    cluster: &K,
    kind: EventType,
    reason: &str,
    message: &str,
    now: &str,
) -> serde_json::Value {
    let metadata = cluster.metadata();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": format!("{}.", metadata.name),
            "namespace": metadata.namespace,
        },
        "involvedObject": {
            "apiVersion": K::API_VERSION,
            "kind": K::KIND,
            "name": metadata.name,
            "namespace": metadata.namespace,
            "uid": metadata.uid,
        },
        "type": kind.as_str(),
        "reason": reason,
        "message": message,
        "source": {"component": K::OPERATOR},
        "reportingComponent": K::OPERATOR,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}

/// `2026-11-22T10:04:05Z`: the RFC 3339 form Kubernetes writes timestamps in (whole seconds,
/// UTC). Built by hand: the allowed crates have no calendar.
pub fn rfc3339(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let days = i64::try_from(seconds / 86_400).unwrap_or(0);
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `2026-01-22T10:15:00Z` (UTC, whole seconds: what Kubernetes and the backup pod write) as a
/// time; anything else is `None`.
pub fn parse_utc(text: &str) -> Option<SystemTime> {
    // Each `0` of the shape is a digit, every other byte itself.
    let shape = b"0000-00-00T00:00:00Z";
    let fits = |(byte, want): (&u8, &u8)| match want {
        b'0' => byte.is_ascii_digit(),
        _ => byte == want,
    };
    if text.len() != shape.len() || !text.as_bytes().iter().zip(shape).all(fits) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text[range].parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// (year, month, day) → days since 1970-01-01 (Howard Hinnant's `days_from_civil`, the inverse
/// of `civil_from_days`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_index = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = u32::try_from(day_of_year - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Known instants format as Kubernetes writes them, leap days included.
    #[test]
    fn timestamps_format_as_rfc3339_utc() {
        let at = |secs: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_341_845), "2026-11-22T10:04:05Z");
    }

    /// The event names the cluster by uid and carries what `kubectl describe` reads.
    #[test]
    fn the_event_names_its_cluster_with_the_uid() {
        let mut cluster =
            PostgresCluster::new("prod", "db", crate::api::PostgresClusterSpec::new(1, "16"));
        cluster.metadata.uid = "uid-1".into();
        let event = event_object(&cluster, EventType::Warning, "Failed", "gone", "now");
        assert_eq!(event["involvedObject"]["uid"], "uid-1");
        assert_eq!(event["involvedObject"]["kind"], "PostgresCluster");
        assert_eq!(event["metadata"]["namespace"], "prod");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["count"], 1);
    }
}

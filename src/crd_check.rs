//! Support: skip it on first read — it is step 01's registration without the update (it only
//! creates an absent CRD), which every later stage runs first.
//!
//! What every stage after 01 does first: make sure our resource type exists and is served,
//! without changing it. Registering the type is step 01's (`crd::ensure`); a later stage creates
//! it only when it is absent, and otherwise goes on with the CRD as it finds it.
//!
//! WORKSHOP.md, step 01 ("Who owns the CRD"); step 02 is the first to call it.

use std::time::Duration;

use serde_json::Value;

use crate::client::Client;
use crate::crd::{
    established, postgres_cluster_crd, read_again, read_or_create, wait_established, CrdError,
    Read, Registration, CRD_NAME, DEFAULT_ESTABLISHED_TIMEOUT, VERSION,
};
use crate::story::Reporter;

/// Every later stage: make sure the type exists and is served, without changing it. Absent →
/// create it (as the workshop's operators registered their type at start) and wait until it is
/// Established; present and serving `v1` → go on, saying once what differs from this build's.
/// Never a PUT: an operator that only watches needs no cluster-wide write, an administrator's
/// CRD stays as installed, and an older operator never downgrades a newer release's schema.
/// `found` hears what was found before the wait, so a learner sees "created" while it lasts.
pub async fn check(
    client: &Client,
    established_timeout: Duration,
    found: impl FnOnce(&Registration),
) -> Result<Registration, CrdError> {
    let ours = postgres_cluster_crd();
    let mut attempt = 1;
    let current = loop {
        match read_or_create(client, &ours).await? {
            Read::Created => break None,
            Read::Found(current) => break Some(current),
            Read::Conflict(error) => read_again(&mut attempt, error, CRD_NAME)?,
        }
    };
    let registration = match &current {
        None => Registration::Created {
            crd: CRD_NAME.into(),
        },
        Some(current) => {
            let registration = Registration::found(current, &ours)?;
            serves_our_version(current)?;
            registration
        }
    };
    registration.report_differences();
    found(&registration);
    match current.as_ref().map(established) {
        // Created just now, or not yet Established: the API server serves nothing until it is.
        None | Some(Some(false)) => wait_established(client, established_timeout).await?,
        Some(Some(true)) => {}
        Some(None) => tracing::debug!("the CRD reports no Established condition; going on"),
    }
    Ok(registration)
}

/// The CRD must serve `v1`, the version every stage reads and writes.
fn serves_our_version(current: &Value) -> Result<(), CrdError> {
    let versions = current["spec"]["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let served: Vec<String> = versions
        .iter()
        .filter(|version| version["served"].as_bool() == Some(true))
        .filter_map(|version| version["name"].as_str().map(str::to_string))
        .collect();
    if served.iter().any(|name| name == VERSION) {
        Ok(())
    } else {
        Err(CrdError::NotServed {
            crd: CRD_NAME.into(),
            served,
        })
    }
}

/// [`check`] as an operator starts: within the default wait, what was found said to `reporter`
/// as one of the operator's own lines.
pub async fn check_and_tell(client: &Client, reporter: &Reporter) -> Result<(), CrdError> {
    check(client, DEFAULT_ESTABLISHED_TIMEOUT, |found| {
        reporter.report_operator(found.to_string())
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Only a served `v1` will do.
    #[test]
    fn the_crd_must_serve_v1() {
        let mut crd = postgres_cluster_crd();
        assert!(serves_our_version(&crd).is_ok());
        crd["spec"]["versions"][0]["served"] = json!(false);
        match serves_our_version(&crd) {
            Err(error @ CrdError::NotServed { .. }) => assert_eq!(
                error.to_string(),
                format!(
                    "CustomResourceDefinition {CRD_NAME} does not serve v1 (it serves: nothing)"
                )
            ),
            other => panic!("{other:?}"),
        }
    }
}

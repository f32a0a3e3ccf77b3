//! Support: skip it on first read — a list in pages is the same list, held 500 objects at a time.
//!
//! A collection → pages of typed objects: list with `limit`, follow `continue` to the end.
//!
//! WORKSHOP.md, step 02 ("Listing in pages"). A list of tens of thousands of objects in one
//! response is tens of megabytes held at once, by the API server and by us. Like client-go's
//! reflector, we ask for [`PAGE_SIZE`] objects at a time: the answer's `metadata.continue` is an
//! opaque token for the rest, and every page is part of one consistent snapshot, taken at the
//! first page's `metadata.resourceVersion` (the point the watch starts from). So the raw JSON held
//! while listing is one page, however large the collection.
//!
//! A continue token lives as long as the server keeps the snapshot's history (etcd compaction,
//! ~5 minutes). Past that, the next page is refused with 410 Expired: the list must start again.

use serde::de::DeserializeOwned;

use crate::api::ObjectList;
use crate::client::{Client, ClientError};
use crate::status::Status;

/// client-go's reflector pages its lists at 500 objects; kube-rs's watcher does too.
pub const PAGE_SIZE: usize = 500;

/// Why the next page could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// 410 on a `continue` request: the snapshot the list was reading is gone. Pages already
    /// read cannot be finished consistently; list again from the first page.
    #[error("the continue token expired: {status}")]
    ContinueExpired { status: Box<Status> },
    /// Any other failure (the first page's 410 included): the list as a whole failed.
    #[error(transparent)]
    Failed(ClientError),
}

/// Reads one list, page by page.
///
/// ```no_run
/// # async fn example(client: postgres_operator::client::Client) -> Result<(), postgres_operator::watch::pages::PageError> {
/// use postgres_operator::api::PostgresCluster;
/// use postgres_operator::watch::pages::{Pager, PAGE_SIZE};
/// let mut pager = Pager::new("/apis/workshop.example.com/v1/namespaces/default/postgresclusters", PAGE_SIZE);
/// while let Some(page) = pager.next_page::<PostgresCluster>(&client).await? {
///     println!("{} clusters as of {}", page.items.len(), page.metadata.resource_version);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Pager {
    collection_path: String,
    limit: usize,
    /// `None` before the first page; then the token for the next one, empty once done.
    continue_token: Option<String>,
}

impl Pager {
    pub fn new(collection_path: &str, limit: usize) -> Pager {
        Pager {
            collection_path: collection_path.to_string(),
            limit: limit.max(1),
            continue_token: None,
        }
    }

    /// The next page; `Ok(None)` once the last page has been read. Every page of one list carries
    /// the first page's `metadata.resourceVersion`, the snapshot the whole list belongs to.
    pub async fn next_page<T: DeserializeOwned>(
        &mut self,
        client: &Client,
    ) -> Result<Option<ObjectList<T>>, PageError> {
        if self.continue_token.as_deref() == Some("") {
            return Ok(None);
        }
        // A continue request carries the same `limit`; its other parameters must match the first
        // request's, or the server refuses the token.
        let mut path = format!(
            "{}{}limit={}",
            self.collection_path,
            query_separator(&self.collection_path),
            self.limit
        );
        if let Some(token) = &self.continue_token {
            path = format!("{path}&continue={}", encode_query_value(token));
        }
        let mut page: ObjectList<T> = match client.get(&path).await {
            Ok(page) => page,
            Err(error) => {
                let continued = self.continue_token.is_some();
                return Err(match error.api_status() {
                    Some(status) if continued && status.is_expired() => {
                        PageError::ContinueExpired {
                            status: Box::new(status.clone()),
                        }
                    }
                    _ => PageError::Failed(error),
                });
            }
        };
        self.continue_token = Some(std::mem::take(&mut page.metadata.continue_token));
        Ok(Some(page))
    }
}

/// `?` to start a query, or `&` when the collection path carries one already (a
/// `labelSelector=`, as stage 04's pod watch does).
pub(crate) fn query_separator(collection_path: &str) -> char {
    if collection_path.contains('?') {
        '&'
    } else {
        '?'
    }
}

/// resourceVersions and continue tokens are opaque (Kubernetes' tokens are base64, with `=`, `+`
/// or `/`): escape anything that is not plain.
pub(crate) fn encode_query_value(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_its_continue_token() {
        let page: ObjectList<serde_json::Value> = serde_json::from_str(
            r#"{"kind":"PostgresClusterList","metadata":{"resourceVersion":"7","continue":"eyJ2Ijo=","remainingItemCount":700},"items":[{"a":1}]}"#,
        )
        .unwrap();
        assert_eq!(page.metadata.resource_version, "7");
        assert_eq!(page.metadata.continue_token, "eyJ2Ijo=");
        assert_eq!(page.metadata.remaining_item_count, Some(700));
        assert_eq!(page.items.len(), 1);
    }

    #[test]
    fn the_last_page_has_no_token() {
        let page: ObjectList<serde_json::Value> =
            serde_json::from_str(r#"{"metadata":{"resourceVersion":"7"},"items":[]}"#).unwrap();
        assert_eq!(page.metadata.continue_token, "");
        assert_eq!(page.metadata.remaining_item_count, None);
    }

    #[test]
    fn tokens_are_escaped_in_the_query() {
        assert_eq!(encode_query_value("a+b/c="), "a%2Bb%2Fc%3D");
    }
}

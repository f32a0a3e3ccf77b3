//! What ends an act: a line of the operator's, or a state of the cluster the tour polls for,
//! printing the operator's lines meanwhile. What the wait finds (the primary, the new backup,
//! the restored pod) goes into the scene for the report and the acts after it.

use std::time::Duration;

use postgres_operator::crd;

use crate::scene::Scene;
use crate::sql::LAST_ARCHIVED;
use crate::status::{new_last_backup, new_primary, ready_members, restored_primary, PhaseLog};
use crate::{failed, TourEnd};

pub enum Until {
    Nothing,
    /// The CustomResourceDefinition's `Established` condition.
    Established,
    /// A line of the operator's, about anything.
    OperatorSays(&'static str),
    /// A line of the operator's about the example.
    ExampleSays(&'static str),
    /// The example has this many members, all ready: its primary.
    Ready(i64),
    /// Another pod than the scene's primary is the primary, and ready.
    NewPrimary,
    /// `status.lastBackup` names another backup than the one noted.
    NewBackup,
    /// `pg_stat_archiver` has archived the segment switched to (or a later one).
    Archived,
    /// The restore is done, the phase Running again, the restored primary ready. The phases
    /// seen on the way are printed.
    Restored,
}

impl Until {
    pub async fn wait(&self, within: Duration, scene: &mut Scene) -> Result<(), TourEnd> {
        let key = scene.key();
        let cluster_path = scene.cluster_path();
        let client = &scene.client;
        let path = cluster_path.as_str();
        let story = &mut scene.story;
        match self {
            Until::Nothing => {}
            Until::Established => crd::wait_established(client, within)
                .await
                .map_err(failed)?,
            Until::OperatorSays(needle) => story.until(None, needle, within).await?,
            Until::ExampleSays(needle) => story.until(Some(&key), needle, within).await?,
            Until::Ready(size) => {
                scene.primary = story
                    .until_state(&format!("{size} ready members"), within, || {
                        ready_members(client, path, *size)
                    })
                    .await?;
            }
            Until::NewPrimary => {
                let old = scene.primary.clone();
                scene.primary = story
                    .until_state("a new primary, ready", within, || {
                        new_primary(client, path, &old)
                    })
                    .await?;
            }
            Until::NewBackup => {
                let before = scene.backup_before.clone();
                scene.last_backup = story
                    .until_state("a new status.lastBackup", within, || {
                        new_last_backup(client, path, before.as_deref())
                    })
                    .await?;
            }
            Until::Archived => {
                let Some(target) = &scene.sql else {
                    return Err(failed("no SQL target to ask pg_stat_archiver"));
                };
                let segment = scene.segment.as_str();
                story
                    .until_state(&format!("{segment} archived"), within, || async {
                        let last = target.run(client, LAST_ARCHIVED).await.ok()?;
                        // Segment names sort as their positions: timeline, then log and segment
                        // numbers.
                        (last.trim() >= segment).then_some(())
                    })
                    .await?;
            }
            Until::Restored => {
                let phases = PhaseLog::default();
                let (restored, reached) = story
                    .until_state("a restored primary, ready", within, || {
                        restored_primary(client, path, &phases)
                    })
                    .await?;
                scene.primary = restored;
                scene.restore_reached = reached;
            }
        }
        Ok(())
    }
}

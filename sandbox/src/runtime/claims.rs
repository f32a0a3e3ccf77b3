//! What a pod's `persistentVolumeClaim` volume means on this node: the directory of the
//! PersistentVolume its claim is bound to, bind-mounted into the containers (read-write unless
//! the volume says `readOnly`). The data outlives the pod; it goes when the claim does and the
//! PV controller (`storage.rs`) reclaims the volume.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The kubelet reads the claim and its volume from the API
//! server; this node's volume code sees the store only through `claim_exists`, so it follows the
//! symlink `claims/<namespace>/<claim>` the PV controller writes when it binds the claim (`ls -l`
//! of the data directory shows every binding the same way). The scheduler already kept the pod
//! Pending until its claims were bound; a claim that is not (any more) gives FailedMount and is
//! retried.

use std::path::{Path, PathBuf};

use super::volumes::MountError;

/// The host directory to mount for claim `claim` of a pod in `namespace`.
pub(crate) fn volume_dir(
    claims_dir: &Path,
    namespace: &str,
    claim: &str,
    claim_exists: &dyn Fn(&str) -> bool,
) -> Result<PathBuf, MountError> {
    if !claim_exists(claim) {
        return Err(MountError(format!(
            "persistentvolumeclaim \"{claim}\" not found"
        )));
    }
    // The volume's real path, resolved now: the mount keeps it even if the claim is re-bound.
    match std::fs::canonicalize(claims_dir.join(namespace).join(claim)) {
        Ok(dir) if dir.is_dir() => Ok(dir),
        _ => Err(MountError(format!(
            "MountVolume.SetUp failed: persistentvolumeclaim \"{claim}\" is not bound to a volume on this node"
        ))),
    }
}

/// Does the pod's volume `name` say `persistentVolumeClaim.readOnly: true`?
pub(crate) fn read_only(volume: &serde_json::Value) -> bool {
    volume["persistentVolumeClaim"]["readOnly"].as_bool() == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound claim is its volume's directory; a missing or unbound one is a FailedMount message.
    #[test]
    fn a_claim_resolves_through_its_binding() {
        let root = std::env::temp_dir().join(format!("sandbox-claims-test-{}", std::process::id()));
        let volume = root.join("persistentvolumes").join("pvc-1");
        std::fs::create_dir_all(&volume).expect("volume dir");
        std::fs::create_dir_all(root.join("claims").join("db")).expect("claims dir");
        std::os::unix::fs::symlink(&volume, root.join("claims").join("db").join("data"))
            .expect("binding");
        let claims = root.join("claims");
        let resolved = volume_dir(&claims, "db", "data", &|_| true).expect("bound");
        assert_eq!(resolved, std::fs::canonicalize(&volume).expect("canonical"));
        assert_eq!(
            volume_dir(&claims, "db", "gone", &|_| false),
            Err(MountError(
                "persistentvolumeclaim \"gone\" not found".into()
            ))
        );
        assert!(volume_dir(&claims, "db", "unbound", &|_| true).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}

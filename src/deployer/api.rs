//! Support: skip it on first read — the `Deployer` kind as Rust sees it (spec, status, the
//! checks a spec must pass), the same shape as `src/api.rs` is for `PostgresCluster`.
//!
//! WORKSHOP.md, "Your own operator: the Deployer". The CRD (`kube/deployer/crd.yaml`) types
//! every field but requires none and bounds none: a bad spec must still be stored, so that the
//! operator can say what is wrong with it as a condition on the object.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::api::{Condition, HasMetadata, ObjectMeta};
use crate::resource::Resource;

pub const KIND: &str = "Deployer";
pub const API_VERSION: &str = "workshop.example.com/v1";
pub const PLURAL: &str = "deployers";
/// How long a step waits for its new pods to be available when the spec does not say.
pub const DEFAULT_DEADLINE_SECONDS: u64 = 60;

/// `/apis/workshop.example.com/v1/namespaces/NS/deployers`.
pub fn collection_path(namespace: &str) -> String {
    format!("/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}")
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployer {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: DeployerSpec,
    #[serde(default)]
    pub status: DeployerStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployerSpec {
    /// Only `canary` is known.
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub deployment: Option<DeploymentSpec>,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub paused: bool,
    /// Seconds a step waits for its new pods to be available before the rollout is rolled back.
    #[serde(default)]
    pub deadline_seconds: Option<u64>,
}

/// The Deployment to run, one per version: `<name>-<version>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentSpec {
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub version: String,
    pub labels: BTreeMap<String, String>,
    pub replicas: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    pub percent: i64,
    /// Seconds to wait once the step's new pods are available.
    pub sleep: u64,
}

/// What the operator writes. Every field is written on every status write, `null` included, so
/// that a merge patch of the whole status removes what went away.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeployerStatus {
    /// The version that runs all `replicas`.
    pub current_version: Option<String>,
    pub rollout: Option<RolloutStatus>,
    /// A version rolled back, not tried again until the spec names another.
    pub rolled_back_version: Option<String>,
    /// `kubectl describe`'s Progress: Percentage, Step, Wait.
    pub progress: Option<Progress>,
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RolloutStatus {
    pub from: String,
    pub to: String,
    /// 1-based, as `Progress.step` says it.
    pub step: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Progress {
    pub percentage: String,
    pub step: String,
    pub wait: String,
}

impl HasMetadata for Deployer {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Resource for Deployer {
    const KIND: &'static str = KIND;
    const API_VERSION: &'static str = API_VERSION;
    const OPERATOR: &'static str = "deployer";
    type Spec = DeployerSpec;
    fn spec(&self) -> &DeployerSpec {
        &self.spec
    }
}

/// `{canary nginx:1.7.7 x10, steps 10/30/60/100, paused: false}`: the story's form.
impl fmt::Display for DeployerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let steps: Vec<String> = self.steps.iter().map(|s| s.percent.to_string()).collect();
        let what = match &self.deployment {
            Some(d) => format!("{}:{} x{}", d.image, d.version, d.replicas),
            None => "no deployment".to_string(),
        };
        let (kind, steps, paused) = (&self.type_, steps.join("/"), self.paused);
        write!(f, "{{{kind} {what}, steps {steps}, paused: {paused}}}")
    }
}

/// Why a spec is refused: each a condition `Valid=False` with this reason and message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.type {0:?} is not one this operator knows: only \"canary\"")]
    UnknownType(String),
    #[error(
        "spec.deployment is missing: say which Deployment to run (name, image, version, replicas)"
    )]
    MissingDeployment,
    #[error("spec.deployment.{0} is empty")]
    EmptyField(&'static str),
    #[error("spec.deployment.namespace {0:?} is not the Deployer's own: an owner reference cannot cross namespaces")]
    OtherNamespace(String),
    #[error("spec.deployment.replicas is {0}: it must be 0 or more")]
    NegativeReplicas(i64),
    #[error("spec.steps[{index}].percent is {percent}: it must be between 1 and 100")]
    PercentOutOfRange { index: usize, percent: i64 },
    #[error("spec.steps[{index}].percent is {percent}, not more than the step before ({before}): steps must increase")]
    StepsNotIncreasing {
        index: usize,
        percent: i64,
        before: i64,
    },
}

impl SpecError {
    /// The condition's reason: one CamelCase word.
    pub fn reason(&self) -> &'static str {
        match self {
            SpecError::UnknownType(_) => "UnknownType",
            SpecError::MissingDeployment => "MissingDeployment",
            SpecError::EmptyField(_) => "EmptyField",
            SpecError::OtherNamespace(_) => "OtherNamespace",
            SpecError::NegativeReplicas(_) => "NegativeReplicas",
            SpecError::PercentOutOfRange { .. } => "PercentOutOfRange",
            SpecError::StepsNotIncreasing { .. } => "StepsNotIncreasing",
        }
    }
}

/// The spec's checks, all before anything is created or scaled: a refused spec changes nothing.
pub fn validate<'a>(
    spec: &'a DeployerSpec,
    namespace: &str,
) -> Result<&'a DeploymentSpec, SpecError> {
    if !spec.type_.is_empty() && spec.type_ != "canary" {
        return Err(SpecError::UnknownType(spec.type_.clone()));
    }
    let deployment = spec
        .deployment
        .as_ref()
        .ok_or(SpecError::MissingDeployment)?;
    for (field, value) in [
        ("name", &deployment.name),
        ("image", &deployment.image),
        ("version", &deployment.version),
    ] {
        if value.is_empty() {
            return Err(SpecError::EmptyField(field));
        }
    }
    if !deployment.namespace.is_empty() && deployment.namespace != namespace {
        return Err(SpecError::OtherNamespace(deployment.namespace.clone()));
    }
    if deployment.replicas < 0 {
        return Err(SpecError::NegativeReplicas(deployment.replicas));
    }
    let mut before = 0;
    for (index, step) in spec.steps.iter().enumerate() {
        let percent = step.percent;
        if !(1..=100).contains(&percent) {
            return Err(SpecError::PercentOutOfRange { index, percent });
        }
        if percent <= before {
            return Err(SpecError::StepsNotIncreasing {
                index,
                percent,
                before,
            });
        }
        before = percent;
    }
    Ok(deployment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(percents: &[i64]) -> DeployerSpec {
        DeployerSpec {
            type_: "canary".into(),
            deployment: Some(DeploymentSpec {
                name: "nginx".into(),
                namespace: "default".into(),
                image: "nginx".into(),
                version: "1.7.7".into(),
                labels: BTreeMap::new(),
                replicas: 10,
            }),
            steps: percents
                .iter()
                .map(|&percent| Step { percent, sleep: 1 })
                .collect(),
            paused: false,
            deadline_seconds: None,
        }
    }

    /// Each bad input is refused with its own reason; the demo's spec passes.
    #[test]
    fn bad_specs_are_refused_with_a_reason_each() {
        assert!(validate(&spec(&[10, 30, 60, 100]), "default").is_ok());
        let reason =
            |spec: &DeployerSpec| validate(spec, "default").map(|_| ()).unwrap_err().reason();
        assert_eq!(reason(&spec(&[10, 30, 30, 100])), "StepsNotIncreasing");
        assert_eq!(reason(&spec(&[10, 130])), "PercentOutOfRange");
        assert_eq!(reason(&spec(&[0])), "PercentOutOfRange");
        let mut missing = spec(&[100]);
        missing.deployment = None;
        assert_eq!(reason(&missing), "MissingDeployment");
        assert_eq!(
            validate(&spec(&[50]), "other")
                .map(|_| ())
                .unwrap_err()
                .reason(),
            "OtherNamespace"
        );
        let mut blue_green = spec(&[100]);
        blue_green.type_ = "blueGreen".into();
        assert_eq!(reason(&blue_green), "UnknownType");
    }

    #[test]
    fn a_spec_reads_as_one_story_line() {
        assert_eq!(
            spec(&[10, 30, 60, 100]).to_string(),
            "{canary nginx:1.7.7 x10, steps 10/30/60/100, paused: false}"
        );
    }
}

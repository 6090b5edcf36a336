//! The generic scale finder (`getScaleController`, `implementsScale`): for
//! an owner of any kind, map group+kind to a resource through discovery,
//! GET its `scale` subresource, and tell "no such object" from "this kind
//! has no scale subresource".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, OwnerReference};

use crate::expected::{ControllerScale, ExpectedError, parse_group_version};

/// Scale versions the scale client understands (`ScaleVersions`).
const SCALE_GROUP_VERSIONS: &[(&str, &str)] = &[
    ("autoscaling", "v1"),
    ("extensions", "v1beta1"),
    ("apps", "v1beta1"),
    ("apps", "v1beta2"),
];

/// Reads scale subresources with the controller's client.
#[derive(Clone)]
pub struct ScaleClient {
    client: kube::Client,
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn lookup(e: kube::Error) -> ExpectedError {
    ExpectedError::Lookup(match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    })
}

impl ScaleClient {
    pub fn new(client: kube::Client) -> Self {
        ScaleClient { client }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, kube::Error> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        self.client.request::<T>(req).await
    }

    /// The scale of `owner`, `Ok(None)` when it does not exist or is a
    /// different object (UID), an error when its kind has no scale.
    pub async fn find(
        &self,
        owner: &OwnerReference,
        namespace: &str,
    ) -> Result<Option<ControllerScale>, ExpectedError> {
        let (group, version) = parse_group_version(&owner.api_version)?;
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let no_match = || {
            let gv = if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            };
            ExpectedError::Lookup(format!(
                "no matches for kind {:?} in version {gv:?}",
                owner.kind
            ))
        };
        let list: APIResourceList = match self.get_json(&base).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => return Err(no_match()),
            Err(e) => return Err(lookup(e)),
        };
        let Some(resource) = list
            .resources
            .iter()
            .find(|r| r.kind == owner.kind && !r.name.contains('/'))
        else {
            return Err(no_match());
        };
        let path = format!(
            "{base}/namespaces/{namespace}/{}/{}/scale",
            resource.name, owner.name
        );
        let scale: serde_json::Value = match self.get_json(&path).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => {
                let sub = format!("{}/scale", resource.name);
                let implements = list.resources.iter().any(|r| {
                    r.name == sub
                        && r.kind == "Scale"
                        && SCALE_GROUP_VERSIONS.iter().any(|(g, v)| {
                            r.group.as_deref() == Some(g) && r.version.as_deref() == Some(v)
                        })
                });
                if !implements {
                    let gr = if group.is_empty() {
                        resource.name.clone()
                    } else {
                        format!("{}.{group}", resource.name)
                    };
                    return Err(ExpectedError::Lookup(format!(
                        "{gr} does not implement the scale subresource"
                    )));
                }
                return Ok(None);
            }
            Err(e) => return Err(lookup(e)),
        };
        let uid = scale["metadata"]["uid"].as_str().unwrap_or("");
        if uid != owner.uid {
            return Ok(None);
        }
        let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
        Ok(Some(ControllerScale {
            uid: owner.uid.clone(),
            replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
        }))
    }
}

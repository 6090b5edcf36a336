//! Writes whose answer is not needed as an object. kube's `Api` builds the
//! full k8s-openapi object from every write's response (a pod with its
//! `managedFields` for each finalizer patch, DELETE and event), which a
//! profile of the Job workload showed as a top cost. [`LeanApi`] sends the
//! same requests through the same client (rate limiter, retries, metrics)
//! and only reads the name and resource version of the answer; serde skips
//! the rest without building it.

use std::fmt::Debug;
use std::marker::PhantomData;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Error, Resource};
use serde::{Deserialize, Serialize};

/// What a write returns here: the object's name and resource version.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Written {
    #[serde(default)]
    pub metadata: WrittenMeta,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenMeta {
    pub name: Option<String>,
    pub resource_version: Option<String>,
}

/// Writes to one namespace's `K` objects, answers reduced to [`Written`].
#[derive(Clone)]
pub struct LeanApi<K> {
    client: kube::Client,
    request: Request,
    _kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()> + Serialize> LeanApi<K> {
    pub fn namespaced(client: kube::Client, namespace: &str) -> Self {
        LeanApi {
            client,
            request: Request::new(K::url_path(&(), Some(namespace))),
            _kind: PhantomData,
        }
    }

    async fn send(
        &self,
        req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        verb: &'static str,
    ) -> Result<Written, Error> {
        let mut req = req.map_err(Error::BuildRequest)?;
        req.extensions_mut().insert(verb);
        self.client.request::<Written>(req).await
    }

    pub async fn create(&self, pp: &PostParams, obj: &K) -> Result<Written, Error> {
        let body = serde_json::to_vec(obj).map_err(Error::SerdeError)?;
        self.send(self.request.create(pp, body), "create").await
    }

    pub async fn patch<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<Written, Error> {
        self.send(self.request.patch(name, pp, patch), "patch")
            .await
    }

    pub async fn patch_status<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<Written, Error> {
        self.send(
            self.request.patch_subresource("status", name, pp, patch),
            "patch_status",
        )
        .await
    }

    pub async fn replace_status(
        &self,
        name: &str,
        pp: &PostParams,
        obj: &K,
    ) -> Result<Written, Error> {
        let body = serde_json::to_vec(obj).map_err(Error::SerdeError)?;
        self.send(
            self.request.replace_subresource("status", name, pp, body),
            "replace_status",
        )
        .await
    }

    /// DELETE; the answer (the object being deleted, or a Status) is read
    /// only for errors.
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<(), Error> {
        self.send(self.request.delete(name, dp), "delete")
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::Written;

    #[test]
    fn answers_reduce_to_name_and_version() -> Result<(), serde_json::Error> {
        let pod: Written = serde_json::from_str(
            r#"{"kind":"Pod","metadata":{"name":"p-x1","resourceVersion":"42","managedFields":[{"manager":"m"}]},
               "spec":{"containers":[{"name":"main"}]},"status":{"phase":"Pending"}}"#,
        )?;
        assert_eq!(pod.metadata.name.as_deref(), Some("p-x1"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("42"));
        let status: Written = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"p"}}"#,
        )?;
        assert!(status.metadata.name.is_none());
        let bare: Written = serde_json::from_str("{}")?;
        assert!(bare.metadata.resource_version.is_none());
        Ok(())
    }
}

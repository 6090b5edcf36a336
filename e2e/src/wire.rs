//! A namespace's pods as the API server sends them, in either encoding,
//! and decoded into the cache type: for the wire-equality test
//! (`tests/pod_wire.rs`) and `kcm-decode-bench`.

use http::header;
use kcm_pod::CachedPod;
use kube::api::ListParams;

use crate::HarnessError;

/// The body of one list of `ns`'s pods asked for as `accept`
/// (`application/json` or protobuf); the answer must be a success in that
/// media type.
pub async fn list_pods_raw(
    client: &kube::Client,
    ns: &str,
    accept: &str,
) -> Result<Vec<u8>, HarnessError> {
    let req = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/pods"))
        .list(&ListParams::default())
        .map_err(|e| HarnessError::Kube(kube::Error::BuildRequest(e)))?;
    let mut req = req.map(kube::client::Body::from);
    let value = accept
        .parse()
        .map_err(|_| HarnessError::Answer(format!("bad media type {accept:?}")))?;
    req.headers_mut().insert(header::ACCEPT, value);
    let res = client.send(req).await?;
    let ct = kcm_runtime::informer::content_type(res.headers()).to_string();
    if !res.status().is_success() || !ct.starts_with(accept) {
        return Err(HarnessError::Answer(format!("{} in {ct:?}", res.status())));
    }
    Ok(res.into_body().collect_bytes().await?.to_vec())
}

#[derive(serde::Deserialize)]
struct JsonList {
    items: Vec<CachedPod>,
}

/// A JSON pod list decoded as the informer decodes each pod.
pub fn json_pods(body: &[u8]) -> Result<Vec<CachedPod>, HarnessError> {
    Ok(serde_json::from_slice::<JsonList>(body)?.items)
}

/// A protobuf pod list decoded as the protobuf informer decodes each pod.
pub fn protobuf_pods(body: &[u8]) -> Result<Vec<CachedPod>, HarnessError> {
    let list = kcm_proto::ListBody::parse(kcm_proto::unwrap_envelope(body)?)?;
    let pods = list.items.into_iter().map(CachedPod::decode_proto);
    Ok(pods.collect::<Result<_, _>>()?)
}

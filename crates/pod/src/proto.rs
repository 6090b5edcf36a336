//! Decoding a [`CachedPod`] from the API server's protobuf (`core/v1`
//! `generated.proto`). It fills the same intermediate structs as the JSON
//! decoder, so both end in one conversion (`WirePod::into_cached`).
//! Skipped fields (`managedFields`, containers, volumes) cost a pointer
//! bump each.
//!
//! Protobuf has no "absent" for Go's non-pointer fields: an empty string
//! or a zero `generation` is written out, where JSON's `omitempty` leaves
//! the field out. Those read here as absent, so both encodings of one pod
//! decode equal (the e2e wire test holds this against a real API server).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kcm_proto::{ProtoError, Reader, Value};

use crate::decode::{
    ConditionDe, ContainerStatusDe, InitContainer, JobAnnotationsDe, LabelsDe, Meta, OwnerRef,
    Spec, StateDe, Status, TerminatedDe, TolerationDe, TrackingDe, WirePod,
};
use crate::{CachedPod, JobAnnotations, Labels};

impl CachedPod {
    /// Decodes a `Pod` message (unwrapped from its envelope).
    pub fn decode_proto(msg: &[u8]) -> Result<CachedPod, ProtoError> {
        let mut wire = WirePod::default();
        each(msg, |f, v| {
            match f {
                1 => wire.metadata = Some(meta(v.bytes(f)?)?),
                2 => wire.spec = Some(spec(v.bytes(f)?)?),
                3 => wire.status = Some(status(v.bytes(f)?)?),
                _ => {}
            }
            Ok(())
        })?;
        Ok(wire.into_cached())
    }
}

/// Calls `f` with every field of `msg`.
fn each<'a>(
    msg: &'a [u8],
    mut f: impl FnMut(u32, Value<'a>) -> Result<(), ProtoError>,
) -> Result<(), ProtoError> {
    let mut r = Reader::new(msg);
    while let Some((field, v)) = r.next()? {
        f(field, v)?;
    }
    Ok(())
}

/// A string field as JSON's `omitempty` would show it.
fn opt_str<'a>(f: u32, v: Value<'a>) -> Result<Option<Cow<'a, str>>, ProtoError> {
    Ok(Some(v.str(f)?).filter(|s| !s.is_empty()))
}

fn opt_string(f: u32, v: Value<'_>) -> Result<Option<String>, ProtoError> {
    Ok(opt_str(f, v)?.map(Cow::into_owned))
}

/// A non-pointer int64 with `omitempty`: zero is absent.
fn nonzero(f: u32, v: Value<'_>) -> Result<Option<i64>, ProtoError> {
    Ok(Some(v.int64(f)?).filter(|n| *n != 0))
}

/// `metav1.Time` {seconds 1, nanos 2}; an empty message is the zero time,
/// which JSON writes as null. Like Go's `Time.Unmarshal`, the nanos are
/// ignored (JSON carries seconds only); seconds beyond what a timestamp
/// can hold (years past ±9999, which RFC 3339 cannot write either) read
/// as absent rather than failing the whole pod.
fn time(f: u32, v: Value<'_>) -> Result<Option<Time>, ProtoError> {
    let msg = v.bytes(f)?;
    if msg.is_empty() {
        return Ok(None);
    }
    let mut secs = 0i64;
    each(msg, |f, v| {
        if f == 1 {
            secs = v.int64(f)?;
        }
        Ok(())
    })?;
    Ok(jiff::Timestamp::new(secs, 0).ok().map(Time))
}

/// A map entry {key 1, value 2}.
fn entry(msg: &[u8]) -> Result<(Cow<'_, str>, Cow<'_, str>), ProtoError> {
    let (mut k, mut val) = (Cow::Borrowed(""), Cow::Borrowed(""));
    each(msg, |f, v| {
        match f {
            1 => k = v.str(f)?,
            2 => val = v.str(f)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((k, val))
}

fn meta(msg: &[u8]) -> Result<Meta<'_>, ProtoError> {
    let mut m = Meta::default();
    let mut labels = Vec::new();
    let mut annotations = JobAnnotations::default();
    let mut tracking = false;
    let mut owners = Vec::new();
    each(msg, |f, v| {
        match f {
            1 => m.name = opt_string(f, v)?,
            3 => m.namespace = opt_str(f, v)?,
            5 => m.uid = opt_string(f, v)?,
            6 => m.resource_version = opt_string(f, v)?,
            7 => m.generation = nonzero(f, v)?,
            8 => m.creation_timestamp = time(f, v)?,
            9 => m.deletion_timestamp = time(f, v)?,
            10 => m.deletion_grace_period_seconds = Some(v.int64(f)?),
            11 => labels.push(entry(v.bytes(f)?)?),
            12 => {
                let (k, val) = entry(v.bytes(f)?)?;
                let slot = match &*k {
                    crate::JOB_COMPLETION_INDEX => &mut annotations.completion_index,
                    crate::JOB_INDEX_FAILURE_COUNT => &mut annotations.index_failure_count,
                    crate::JOB_INDEX_IGNORED_FAILURE_COUNT => {
                        &mut annotations.index_ignored_failure_count
                    }
                    _ => return Ok(()),
                };
                *slot = Some(val.into());
            }
            13 => owners.push(owner(v.bytes(f)?)?),
            14 => tracking |= *v.str(f)? == *crate::JOB_TRACKING_FINALIZER,
            _ => {}
        }
        Ok(())
    })?;
    if !labels.is_empty() {
        let pairs = labels.into_iter().map(|(k, v)| (k, v.into_owned()));
        m.labels = Some(LabelsDe(Labels::from_pairs(pairs)));
    }
    m.annotations = Some(JobAnnotationsDe(annotations));
    m.owner_references = Some(owners);
    m.finalizers = Some(TrackingDe(tracking));
    Ok(m)
}

fn owner(msg: &[u8]) -> Result<OwnerRef<'_>, ProtoError> {
    let mut o = OwnerRef::default();
    each(msg, |f, v| {
        match f {
            1 => o.kind = v.str(f)?,
            3 => o.name = v.str(f)?.into_owned(),
            4 => o.uid = v.str(f)?.into_owned(),
            5 => o.api_version = v.str(f)?,
            6 => o.controller = Some(v.bool(f)?),
            7 => o.block_owner_deletion = Some(v.bool(f)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(o)
}

fn spec(msg: &[u8]) -> Result<Spec<'_>, ProtoError> {
    let mut s = Spec::default();
    let mut tolerations = Vec::new();
    let mut inits = Vec::new();
    each(msg, |f, v| {
        match f {
            10 => s.node_name = opt_str(f, v)?,
            20 => inits.push(init_container(v.bytes(f)?)?),
            22 => tolerations.push(toleration(v.bytes(f)?)?),
            _ => {}
        }
        Ok(())
    })?;
    s.tolerations = (!tolerations.is_empty()).then_some(tolerations);
    s.init_containers = Some(inits);
    Ok(s)
}

fn init_container(msg: &[u8]) -> Result<InitContainer<'_>, ProtoError> {
    let mut c = InitContainer::default();
    each(msg, |f, v| {
        match f {
            1 => c.name = v.str(f)?,
            // A pointer in Go: present means set, even if empty.
            24 => c.restart_policy = Some(v.str(f)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

fn toleration(msg: &[u8]) -> Result<TolerationDe, ProtoError> {
    let mut t = TolerationDe::default();
    each(msg, |f, v| {
        match f {
            1 => t.key = opt_string(f, v)?,
            2 => t.operator = opt_string(f, v)?,
            3 => t.value = opt_string(f, v)?,
            4 => t.effect = opt_string(f, v)?,
            5 => t.toleration_seconds = Some(v.int64(f)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(t)
}

fn status(msg: &[u8]) -> Result<Status<'_>, ProtoError> {
    let mut s = Status::default();
    let (mut conditions, mut containers, mut inits) = (Vec::new(), Vec::new(), Vec::new());
    each(msg, |f, v| {
        match f {
            1 => s.phase = opt_str(f, v)?,
            2 => conditions.push(condition(v.bytes(f)?)?),
            4 => s.reason = opt_str(f, v)?,
            8 => containers.push(container_status(v.bytes(f)?)?),
            10 => inits.push(container_status(v.bytes(f)?)?),
            17 => s.observed_generation = nonzero(f, v)?,
            _ => {}
        }
        Ok(())
    })?;
    s.conditions = Some(conditions);
    s.container_statuses = Some(containers);
    s.init_container_statuses = Some(inits);
    Ok(s)
}

fn condition(msg: &[u8]) -> Result<ConditionDe<'_>, ProtoError> {
    let mut c = ConditionDe::default();
    each(msg, |f, v| {
        match f {
            1 => c.type_ = v.str(f)?,
            2 => c.status = v.str(f)?,
            3 => c.last_probe_time = time(f, v)?,
            4 => c.last_transition_time = time(f, v)?,
            5 => c.reason = opt_string(f, v)?,
            6 => c.message = opt_string(f, v)?,
            7 => c.observed_generation = nonzero(f, v)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

fn container_status(msg: &[u8]) -> Result<ContainerStatusDe<'_>, ProtoError> {
    let mut c = ContainerStatusDe::default();
    each(msg, |f, v| {
        match f {
            1 => c.name = v.str(f)?,
            2 => c.state = Some(state(v.bytes(f)?)?),
            5 => c.restart_count = Some(v.int32(f)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(c)
}

/// `ContainerState` {waiting 1, running 2, terminated 3}: only terminated.
fn state(msg: &[u8]) -> Result<StateDe, ProtoError> {
    let mut s = StateDe::default();
    each(msg, |f, v| {
        if f == 3 {
            let mut t = TerminatedDe::default();
            each(v.bytes(f)?, |f, v| {
                match f {
                    1 => t.exit_code = Some(v.int32(f)?),
                    6 => t.finished_at = time(f, v)?,
                    _ => {}
                }
                Ok(())
            })?;
            s.terminated = Some(t);
        }
        Ok(())
    })?;
    Ok(s)
}

#[cfg(test)]
mod tests;

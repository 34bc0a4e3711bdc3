//! The Pod schema as strategic merge patch reads it: which fields of which Go types merge
//! their lists, and by which key (`patchStrategy`, `patchMergeKey` in `k8s.io/api/core/v1`).

/// Go struct types of the Pod schema that carry patch strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    Pod,
    ObjectMeta,
    PodSpec,
    Container,
    PodStatus,
    /// Any other type: no list strategies below it.
    Other,
}

/// Patch metadata of one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FieldMeta {
    pub(super) schema: Schema,
    pub(super) merge: bool,
    pub(super) merge_key: Option<&'static str>,
}

const fn plain(schema: Schema) -> FieldMeta {
    FieldMeta {
        schema,
        merge: false,
        merge_key: None,
    }
}

const fn merged(schema: Schema, key: Option<&'static str>) -> FieldMeta {
    FieldMeta {
        schema,
        merge: true,
        merge_key: key,
    }
}

impl Schema {
    /// Field metadata (`patchStrategy`, `patchMergeKey`) as declared in `k8s.io/api/core/v1`.
    pub(super) fn field(self, key: &str) -> FieldMeta {
        use Schema::*;
        match (self, key) {
            (Pod, "metadata") => plain(ObjectMeta),
            (Pod, "spec") => plain(PodSpec),
            (Pod, "status") => plain(PodStatus),
            (ObjectMeta, "ownerReferences") => merged(Other, Some("uid")),
            (ObjectMeta, "finalizers") => merged(Other, None),
            (PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
                merged(Container, Some("name"))
            }
            (PodSpec, "volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims") => {
                merged(Other, Some("name"))
            }
            (PodSpec, "hostAliases") => merged(Other, Some("ip")),
            (PodSpec, "topologySpreadConstraints") => merged(Other, Some("topologyKey")),
            (Container, "ports") => merged(Other, Some("containerPort")),
            (Container, "env") => merged(Other, Some("name")),
            (Container, "volumeMounts") => merged(Other, Some("mountPath")),
            (Container, "volumeDevices") => merged(Other, Some("devicePath")),
            (PodStatus, "conditions") => merged(Other, Some("type")),
            (PodStatus, "podIPs" | "hostIPs") => merged(Other, Some("ip")),
            (PodStatus, "resourceClaimStatuses") => merged(Other, Some("name")),
            _ => plain(Other),
        }
    }
}

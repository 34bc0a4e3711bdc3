//! Finding a pod's WorkloadSpread, and the spreads a new one may conflict with, without
//! copying every WorkloadSpread of the namespace (#31): the candidates are listed pruned
//! to what matching reads (one fixed field mask, `masks::WORKLOADSPREAD_TARGET_FIELDS`),
//! core's rule picks one, and only that one is read whole. The candidates are either the
//! namespace's every spread (`SpreadLookup::List`: one stable request, so policy-server
//! keeps one cache for them) or, where the host answers field selectors from its cache,
//! only those whose `spec.targetRef.name` is a name on the pod's owner chain
//! (`SpreadLookup::TargetName`: the cost does not grow with the spreads in the
//! namespace). Both run the same rule on candidates in name order; a spread targeting
//! none of those names cannot match.

use crate::host::{Host, HostError};
use crate::settings::SpreadLookup;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use workloadspread_core::api::v1beta1::{WorkloadSpread, API_VERSION};
use workloadspread_core::api::KIND;
use workloadspread_core::fields::FieldSelector;
use workloadspread_core::masks::WORKLOADSPREAD_TARGET_FIELDS;
use workloadspread_core::selector::Labels;
use workloadspread_core::workload::{
    find_matching_workloadspread, owner_chain, ObjectRef, OwnerLookupError, SpreadTarget,
    Targeting as _, WorkloadKinds, TARGET_NAME_FIELD,
};

/// Why a pod's WorkloadSpread could not be told.
#[derive(Debug)]
pub enum LookupError {
    /// Listing the namespace's WorkloadSpreads failed.
    Listing(HostError),
    /// Reading the matched WorkloadSpread failed.
    Reading(HostError),
    /// An owner of the pod does not exist.
    Owner(String),
}

impl LookupError {
    /// What was being done, for the rejection message.
    pub fn context(&self) -> &'static str {
        match self {
            LookupError::Listing(_) => "listing WorkloadSpreads",
            LookupError::Reading(_) => "reading the pod's WorkloadSpread",
            LookupError::Owner(_) => "resolving the pod's owners",
        }
    }
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::Listing(e) | LookupError::Reading(e) => fmt::Display::fmt(e, f),
            LookupError::Owner(e) => f.write_str(e),
        }
    }
}

/// The WorkloadSpreads of `namespace` as far as matching and the conflict check read
/// them: the host's answer, to decode with [`spread_targets`]. A host that ignores the
/// mask answers whole objects: they decode the same.
pub fn list_spread_targets(host: &dyn Host, namespace: &str) -> Result<Vec<u8>, HostError> {
    host.list_fields_json(
        API_VERSION,
        KIND,
        namespace,
        None,
        WORKLOADSPREAD_TARGET_FIELDS,
    )
}

/// The host's answers holding the candidates among the WorkloadSpreads of `namespace`
/// for targets named `names`: with [`SpreadLookup::TargetName`] one list per name,
/// selected by `spec.targetRef.name`, or — when the host cannot answer a field selector,
/// or with [`SpreadLookup::List`] — the one list of them all.
pub fn candidate_answers(
    host: &dyn Host,
    namespace: &str,
    names: &[&str],
    lookup: SpreadLookup,
) -> Result<Vec<Vec<u8>>, HostError> {
    if lookup == SpreadLookup::TargetName {
        let selected: Result<Vec<Vec<u8>>, HostError> = names
            .iter()
            .map(|name| {
                let selector = FieldSelector::equals(TARGET_NAME_FIELD, name);
                host.list_fields_json_selected(
                    API_VERSION,
                    KIND,
                    namespace,
                    &selector,
                    WORKLOADSPREAD_TARGET_FIELDS,
                )
            })
            .collect();
        if let Ok(answers) = selected {
            return Ok(answers);
        }
    }
    Ok(vec![list_spread_targets(host, namespace)?])
}

/// The candidates of several answers, each once, in name order (the API server's list
/// order): a host that ignored a field selector answered some twice.
pub fn merged_targets(answers: &[Vec<u8>]) -> Result<Vec<SpreadTarget<'_>>, String> {
    let mut all = Vec::new();
    for answer in answers {
        all.extend(spread_targets(answer)?);
    }
    all.sort_by(|a, b| a.name().cmp(b.name()));
    all.dedup_by(|a, b| a.name() == b.name());
    Ok(all)
}

/// The items of a WorkloadSpread `List` answer as [`SpreadTarget`]s borrowing from it;
/// should one not decode (a structural CRD schema makes that unlikely), the others
/// still are, item by item.
pub fn spread_targets(answer: &[u8]) -> Result<Vec<SpreadTarget<'_>>, String> {
    // `items` may be null or missing in an empty list.
    #[derive(Deserialize)]
    struct List<T> {
        #[serde(default = "Option::default")]
        items: Option<Vec<T>>,
    }
    #[derive(Deserialize)]
    struct Targets<'a> {
        #[serde(default, borrow)]
        items: Option<Vec<SpreadTarget<'a>>>,
    }
    if let Ok(list) = serde_json::from_slice::<Targets<'_>>(answer) {
        return Ok(list.items.unwrap_or_default());
    }
    let list: List<Value> =
        serde_json::from_slice(answer).map_err(|e| format!("invalid answer: {e}"))?;
    Ok(list
        .items
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| SpreadTarget::deserialize(i).ok())
        .collect())
}

/// The WorkloadSpreads of `namespace`, whole (the fallback when a spread changed
/// between the masked list and the read of the one that matched).
fn whole_workloadspreads(
    host: &dyn Host,
    namespace: &str,
) -> Result<Vec<WorkloadSpread>, HostError> {
    let items = host.list(API_VERSION, KIND, namespace, None)?;
    Ok(items
        .into_iter()
        .filter_map(|i| serde_json::from_value(i).ok())
        .collect())
}

/// The pod a WorkloadSpread is looked for: its controller and its labels.
#[derive(Clone, Copy)]
pub struct PodOwner<'a> {
    pub controller: &'a ObjectRef,
    pub labels: &'a Labels,
}

/// The WorkloadSpread a pod belongs to (core's rule on the masked candidates), read
/// whole, or pruned to the fields `read_fields` names for the one that matched (empty:
/// whole; `core::admission::spread_fields`). Should the one that matched have changed or been deleted between the two
/// reads, the rule runs again on the whole spreads, as one list (the pod's owners are not
/// looked up again). With [`SpreadLookup::TargetName`] the owner chain is looked up
/// first; should that fail, the candidates are every spread and the rule meets the
/// failure where it did before (only if a spread needs that owner).
pub fn matching_workloadspread(
    host: &dyn Host,
    namespace: &str,
    PodOwner { controller, labels }: PodOwner<'_>,
    kinds: &WorkloadKinds,
    lookup: SpreadLookup,
    mut owner_of: impl FnMut(&ObjectRef) -> Result<Option<ObjectRef>, OwnerLookupError>,
    read_fields: impl FnOnce(&SpreadTarget<'_>) -> &'static [&'static str],
) -> Result<Option<WorkloadSpread>, LookupError> {
    // Each owner is looked up once for both matches (a failed lookup is not remembered:
    // the rule tries it again for the next spread, as the reference does).
    let mut known: BTreeMap<ObjectRef, Option<ObjectRef>> = BTreeMap::new();
    let mut owner_of = |o: &ObjectRef| {
        if let Some(controller) = known.get(o) {
            return Ok(controller.clone());
        }
        let controller = owner_of(o)?;
        known.insert(o.clone(), controller.clone());
        Ok(controller)
    };
    let answers = match lookup {
        SpreadLookup::TargetName => match owner_chain(controller, kinds, &mut owner_of) {
            Ok(chain) if chain.is_empty() => return Ok(None),
            Ok(chain) => {
                let mut names: Vec<&str> = chain.iter().map(|o| o.name.as_str()).collect();
                names.sort_unstable();
                names.dedup();
                candidate_answers(host, namespace, &names, lookup)
            }
            Err(_) => candidate_answers(host, namespace, &[], SpreadLookup::List),
        },
        SpreadLookup::List => candidate_answers(host, namespace, &[], lookup),
    }
    .map_err(LookupError::Listing)?;
    let targets = merged_targets(&answers).map_err(|reason| {
        LookupError::Listing(HostError {
            what: format!("list {API_VERSION} {KIND} in {namespace}"),
            reason,
        })
    })?;
    let matched = find_matching_workloadspread(&targets, controller, labels, kinds, &mut owner_of)
        .map_err(LookupError::Owner)?;
    let Some(target) = matched.workloadspread else {
        return Ok(None);
    };
    let fields = read_fields(target);
    match host.get_fields(API_VERSION, KIND, Some(namespace), target.name(), fields) {
        Ok(whole) => {
            if let Ok(ws) = serde_json::from_value::<WorkloadSpread>(whole) {
                if target.still_describes(&ws) {
                    return Ok(Some(ws));
                }
            }
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(LookupError::Reading(e)),
    }
    let wss = whole_workloadspreads(host, namespace).map_err(LookupError::Listing)?;
    let matched = find_matching_workloadspread(&wss, controller, labels, kinds, &mut owner_of)
        .map_err(LookupError::Owner)?;
    Ok(matched.workloadspread.cloned())
}

#[cfg(test)]
mod tests;

//! Whether OpenKruise's WorkloadSpread validation is registered
//! (`core::contest::openkruise_registered`): while it is, OpenKruise owns WorkloadSpreads
//! and the host and the controller stand back from every one; `workloadspread-host
//! openkruise hand-over` taking it out is the take-over (`docs/operations.md`, "Coming from
//! OpenKruise"). One watch of one object by name (RBAC: get, list and watch of
//! `validatingwebhookconfigurations` named `kruise-validating-webhook-configuration`).

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use workloadspread_core::contest::{
    openkruise_validation, OpenKruiseValidation, OPENKRUISE_CONFIGURATION, OPENKRUISE_HANDED_OVER,
    OPENKRUISE_WEBHOOK,
};

fn registered(config: &ValidatingWebhookConfiguration) -> bool {
    let handed_over = config
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(OPENKRUISE_HANDED_OVER));
    let webhooks = config.webhooks.iter().flatten().map(|w| w.name.as_str());
    match openkruise_validation(webhooks, handed_over) {
        OpenKruiseValidation::Absent => false,
        OpenKruiseValidation::Registered => true,
        OpenKruiseValidation::Returned => {
            tracing::warn!(
                "{OPENKRUISE_WEBHOOK} is back in {OPENKRUISE_CONFIGURATION} after a hand-over \
                 (an upgrade of OpenKruise?): still spreading; it refuses every write of a \
                 WorkloadSpread while OpenKruise's gate is off — run `workloadspread-host \
                 openkruise hand-over` again"
            );
            false
        }
    }
}

/// Whether it is registered: at each first list (or relist) and at every change of the
/// configuration; `Err` for a watch that failed (RBAC, the API server away: retried with
/// backoff, and logged), which decides nothing — a caller waiting for the first `Ok` knows
/// nothing is decided on a guess, and can say why it waits.
pub fn registrations(client: Client) -> BoxStream<'static, Result<bool, String>> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    // Its lists read etcd, not the watch cache: a relist never goes back in time.
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={OPENKRUISE_CONFIGURATION}"))
        .list_semantic(watcher::ListSemantic::MostRecent);
    let mut listed = false;
    watcher::watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let state = match event {
                Ok(Event::Init) => {
                    listed = false;
                    None
                }
                Ok(Event::InitApply(o)) => {
                    listed |= registered(&o);
                    None
                }
                Ok(Event::InitDone) => Some(Ok(listed)),
                Ok(Event::Apply(o)) => Some(Ok(registered(&o))),
                Ok(Event::Delete(_)) => Some(Ok(false)),
                Err(e) => {
                    let e = format!(
                        "watching validatingwebhookconfigurations/{OPENKRUISE_CONFIGURATION} \
                         (whether OpenKruise owns WorkloadSpreads): {e}"
                    );
                    tracing::warn!("{e}");
                    Some(Err(e))
                }
            };
            futures::future::ready(state)
        })
        .boxed()
}

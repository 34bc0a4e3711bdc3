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
use workloadspread_core::contest::{openkruise_registered, OPENKRUISE_CONFIGURATION};

fn registered(config: &ValidatingWebhookConfiguration) -> bool {
    openkruise_registered(config.webhooks.iter().flatten().map(|w| w.name.as_str()))
}

/// Whether it is registered: at each first list (or relist) and at every change of the
/// configuration. A watch that fails (RBAC, the API server away) is retried with backoff
/// and logged; nothing is yielded meanwhile, so a caller that waits for the first value
/// knows nothing is decided on a guess.
pub fn registrations(client: Client) -> BoxStream<'static, bool> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={OPENKRUISE_CONFIGURATION}"));
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
                Ok(Event::InitDone) => Some(listed),
                Ok(Event::Apply(o)) => Some(registered(&o)),
                Ok(Event::Delete(_)) => Some(false),
                Err(e) => {
                    tracing::warn!(
                        "watching {OPENKRUISE_CONFIGURATION} (whether OpenKruise owns \
                         WorkloadSpreads): {e}"
                    );
                    None
                }
            };
            futures::future::ready(state)
        })
        .boxed()
}
